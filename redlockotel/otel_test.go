package redlockotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/redlockotel"
)

// A scripted run on real nodes (a lock, contention, a hung minority node, a
// lost lock) and the spans and metrics it leaves: they are what the run did.
func TestSpansAndMetricsOfARun(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := redlockotel.New(redlockotel.WithTracerProvider(tp), redlockotel.WithMeterProvider(mp))
	require.NoError(t, err)

	f := redistest.New(t, redistest.Setup{Nodes: 3, Proxied: true, Client: redistest.NoClientTimeouts})
	rl, err := redlock.New(f.Clients, redlock.WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	ctx := context.Background()

	// 1. A lock, held 50ms, released.
	parent, root := tp.Tracer("test").Start(ctx, "job")
	l, err := rl.Acquire(parent, []string{"otel"}, 10*time.Second)
	require.NoError(t, err)
	// 2. Contention: a try-lock with 2 retries.
	_, err = rl.Acquire(ctx, []string{"otel"}, time.Second, redlock.WithRetryCount(2), redlock.WithRetryDelay(5*time.Millisecond),
		redlock.WithWakeOnRelease(false))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	time.Sleep(50 * time.Millisecond)
	_, err = l.Release(parent)
	require.NoError(t, err)
	root.End()
	// 3. A hung minority node: the lock is granted, node 2 votes timeout.
	f.Proxies[2].Set(redistest.DropReplies)
	l, err = rl.Acquire(ctx, []string{"otel2"}, 10*time.Second)
	require.NoError(t, err)
	_, _ = l.Release(ctx)
	time.Sleep(150 * time.Millisecond) // the hung node's votes are counted
	f.Proxies[2].Heal()
	// 4. A lost lock.
	err = rl.Using(ctx, []string{"otel3"}, 700*time.Millisecond, func(ctx context.Context) error {
		for _, c := range f.Peek {
			c.Set(ctx, "otel3", "stolen", time.Minute)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, redlock.ErrExtensionFailed)

	// Spans.
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	acq := byName["redlock.acquire"]
	require.Len(t, acq, 4, "4 Acquires: the lock, the contended one, the one past the hung node, Using's")
	assert.Equal(t, root.SpanContext().SpanID(), acq[0].Parent().SpanID(), "the first Acquire's span is a child of the caller's")
	assert.Equal(t, attribute.StringValue("contention"), attr(acq[1], "redlock.outcome"))
	assert.Equal(t, attribute.IntValue(3), attr(acq[1], "redlock.attempts"))
	assert.Equal(t, "Error", acq[1].Status().Code.String())
	assert.Equal(t, attribute.StringValue("ok"), attr(acq[2], "redlock.outcome"))
	assert.Equal(t, attribute.StringValue("redis"), attr(acq[0], "db.system.name"))
	require.Len(t, byName["redlock.using"], 1)
	assert.Equal(t, attribute.BoolValue(true), attr(byName["redlock.using"][0], "redlock.lost"))
	assert.NotEmpty(t, byName["redlock.release"])
	assert.NotEmpty(t, byName["redlock.extend"], "Using's extensions")

	// Metrics.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	ops := sumsBy(t, rm, "redlock.operations", "redlock.operation", "redlock.outcome")
	assert.Equal(t, int64(3), ops["acquire/ok"])
	assert.Equal(t, int64(1), ops["acquire/contention"])
	assert.GreaterOrEqual(t, ops["release/ok"], int64(2))
	assert.GreaterOrEqual(t, ops["extend/expired"], int64(1), "the extension that found the lock gone")
	votes := sumsBy(t, rm, "redlock.attempt.votes_against", "redlock.node", "error.type")
	// Nodes are named by their addresses: the proxies the clients talk to.
	node := func(i int) string { return f.Proxies[i].Addr() }
	held := votes[node(0)+"/held"] + votes[node(1)+"/held"] + votes[node(2)+"/held"]
	assert.True(t, held >= 6 && held <= 9, "the contended Acquire's 3 attempts: 2 or 3 nodes each said held (%d): %v", held, votes)
	assert.GreaterOrEqual(t, votes[node(2)+"/timeout"]+votes[node(2)+"/circuit_open"], int64(1), "the hung node")
	lost := sumsBy(t, rm, "redlock.locks.lost")
	assert.Equal(t, int64(1), lost[""])
	hold := histogramCount(t, rm, "redlock.lock.hold.duration")
	assert.GreaterOrEqual(t, hold, uint64(3), "two released locks and the lost one")
	attempts := histogramCount(t, rm, "redlock.acquire.attempts")
	assert.Equal(t, uint64(4), attempts)
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// sumsBy returns a counter's values keyed by the given attributes' values,
// joined with "/".
func sumsBy(t *testing.T, rm metricdata.ResourceMetrics, name string, keys ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "%s is a sum", name)
			for _, dp := range sum.DataPoints {
				k := ""
				for i, key := range keys {
					v, _ := dp.Attributes.Value(attribute.Key(key))
					if i > 0 {
						k += "/"
					}
					k += fmt.Sprint(v.AsInterface())
				}
				out[k] += dp.Value
			}
		}
	}
	return out
}

func histogramCount(t *testing.T, rm metricdata.ResourceMetrics, name string) uint64 {
	t.Helper()
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch h := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			case metricdata.Histogram[int64]:
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

// Every counter's series exists at zero before its first event, so that an
// alert on any increase sees the first lost lock; and an Extend that finds
// the lock gone counts as a lost lock, once. (Issue 23: after two healthy
// scrapes redlock_locks_lost_total did not exist, and only Using's losses
// were counted.)
func TestCountersStartAtZeroAndExtendsCountLosses(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := redlockotel.New(redlockotel.WithMeterProvider(mp))
	require.NoError(t, err)
	ctx := context.Background()
	collect := func() metricdata.ResourceMetrics {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		return rm
	}
	rm := collect()
	lost := sumsBy(t, rm, "redlock.locks.lost")
	require.Contains(t, lost, "", "the lost-locks series exists before any loss")
	assert.Zero(t, lost[""])
	ops := sumsBy(t, rm, "redlock.operations", "redlock.operation", "redlock.outcome")
	for _, k := range []string{"acquire/contention", "acquire/node_failure", "extend/expired", "release/node_failure"} {
		require.Contains(t, ops, k)
		assert.Zero(t, ops[k], k)
	}
	assert.Contains(t, sumsBy(t, rm, "redlock.waits", "redlock.woken"), "true")

	f := redistest.New(t, redistest.Setup{Nodes: 3})
	rl, err := redlock.New(f.Clients, redlock.WithObserver(obs))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	l, err := rl.Acquire(ctx, []string{"gone"}, 10*time.Second)
	require.NoError(t, err)
	for _, c := range f.Peek { // taken by another (a key merely deleted is written back)
		require.NoError(t, c.Set(ctx, "gone", "another", 10*time.Second).Err())
	}
	for range 2 { // told once, however often the handle is tried
		_, err = l.Extend(ctx, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrLockExpired)
	}
	assert.Equal(t, int64(1), sumsBy(t, collect(), "redlock.locks.lost")[""], "an Extend that found the lock gone")
}
