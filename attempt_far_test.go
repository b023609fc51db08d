package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// Far nodes (issue 31): setting up a connection (dialing, the handshake,
// loading the scripts) is not a node's answer being late. Before, the node
// timeout bounded the whole cold call, about five round trips, and a call
// abandoned at its timeout left the next attempt to start from scratch: a
// fresh Redlock's try-lock on nodes 30 ms away failed on every node with the
// defaults.

// farNodes is a fresh Redlock (no call made yet) over three nodes that are
// oneWay away each way, behind proxies that also charge a new connection
// its handshake's round trip, with go-redis's default clients.
func farNodes(t *testing.T, oneWay time.Duration, opts ...redlock.Option) *fixture {
	t.Helper()
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true}, opts...)
	for _, p := range f.Proxies {
		p.SetLatency(oneWay, oneWay)
		p.SetDialLatency(2 * oneWay)
	}
	return f
}

// TestFirstTryLockOnFarNodes: the first try-lock of a fresh Redlock succeeds
// on nodes 30 ms away (round trip) with the default options, and on nodes
// 80 ms away with a node timeout that covers one round trip.
func TestFirstTryLockOnFarNodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		oneWay time.Duration
		opts   []redlock.Option
	}{
		{15 * time.Millisecond, nil},
		{40 * time.Millisecond, []redlock.Option{redlock.WithNodeTimeout(150 * time.Millisecond)}},
	} {
		t.Run((2 * c.oneWay).String(), func(t *testing.T) {
			f := farNodes(t, c.oneWay, c.opts...)
			ctx := context.Background()
			l, err := f.rl.Acquire(ctx, []string{"far"}, 10*time.Second, redlock.WithRetryCount(0))
			require.NoError(t, err, "the first try-lock on nodes %v away (round trip)", 2*c.oneWay)
			// The release (another script) costs one round trip too.
			_, err = l.Release(ctx, redlock.WithRetryCount(0))
			require.NoError(t, err, "its release")
		})
	}
}

// TestRoundTripAboveNodeTimeoutIsNamed: nodes whose round trip is above the
// node timeout fail with an error that gives the round trip and the option
// to raise.
func TestRoundTripAboveNodeTimeoutIsNamed(t *testing.T) {
	t.Parallel()
	f := farNodes(t, 40*time.Millisecond, redlock.WithNodeTimeout(50*time.Millisecond))
	ctx := context.Background()
	var err error
	// The first attempts learn the round trip from their late answers (on
	// a loaded machine, more of them than three: CI's run on b90c1ce).
	assert.Eventually(t, func() bool {
		_, err = f.rl.Acquire(ctx, []string{"far"}, 10*time.Second, redlock.WithRetryCount(0))
		return assert.Error(t, err) && strings.Contains(err.Error(), "round trip")
	}, 20*time.Second, 200*time.Millisecond, "Acquire's error on nodes 80 ms away with a node timeout of 50 ms names the round trip")
	t.Log(err)
	assert.Contains(t, err.Error(), "WithNodeTimeout", "Acquire's error on nodes 80 ms away with a node timeout of 50 ms")
}

// BenchmarkColdFirstCall measures a fresh Redlock's first try-lock (new
// clients, no connection yet) on three nodes 0, 15 and 40 ms away each way,
// with the default options; ok/op is the share that succeeded.
//
//	go test -run '^$' -bench '^BenchmarkColdFirstCall$' -benchtime 20x
func BenchmarkColdFirstCall(b *testing.B) {
	nodes := redistest.Start(b, 3)
	proxies := make([]*redistest.Proxy, len(nodes))
	for i, nd := range nodes {
		proxies[i] = redistest.NewProxy(b, nd.Addr())
	}
	ctx := context.Background()
	for _, oneWay := range []time.Duration{0, 15 * time.Millisecond, 40 * time.Millisecond} {
		b.Run("oneway="+oneWay.String(), func(b *testing.B) {
			for _, p := range proxies {
				p.SetLatency(oneWay, oneWay)
				p.SetDialLatency(2 * oneWay)
			}
			ok, n := 0, 0
			for b.Loop() {
				n++
				key := oneWay.String() + ":" + time.Now().String() // never held before
				b.StopTimer()
				clients := make([]redis.UniversalClient, len(proxies))
				for i, p := range proxies {
					clients[i] = redis.NewClient(&redis.Options{Addr: p.Addr()})
				}
				rl, err := redlock.New(clients)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				l, err := rl.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(0))
				b.StopTimer()
				if err == nil {
					ok++
					_, _ = l.Release(ctx)
				}
				_ = rl.Close()
				for _, c := range clients {
					_ = c.Close()
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(ok)/float64(n), "ok/op")
		})
	}
}

// TestSetUpOfASilentNodeIsBounded measures the promise on a node that
// accepts connections and never answers, on a fresh Redlock (no connection
// yet): a call waits for its set-up at most 5 node timeouts (then the
// breaker opens), and the next call to it fails at once, unsent.
func TestSetUpOfASilentNodeIsBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3}, redlock.WithNodeTimeout(100*time.Millisecond))
	for _, nd := range f.Nodes[1:] {
		nd.Pause()
		t.Cleanup(nd.Resume)
	}
	ctx := context.Background()
	start := time.Now()
	_, err := f.rl.Acquire(ctx, []string{"silent"}, 10*time.Second, redlock.WithRetryCount(0))
	took := time.Since(start)
	require.Error(t, err)
	t.Logf("first try-lock: %v: %v", took, err)
	assert.Contains(t, err.Error(), "no connection set up within 500ms")
	assert.Less(t, took, 500*time.Millisecond+time.Second, "the first try-lock waited past 5 node timeouts (plus a margin)")
	start = time.Now()
	_, err = f.rl.Acquire(ctx, []string{"silent"}, 10*time.Second, redlock.WithRetryCount(0))
	took = time.Since(start)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not sent", "the breaker is open")
	assert.Less(t, took, 300*time.Millisecond, "the second try-lock waited for a silent node (it fails at once: a margin for a loaded machine)")
}

// A node whose first connection could not be set up, then silent on the
// next attempts, is reported with the bound that passed and why it was that
// bound: 5 node timeouts for the first set-up, one once the node was found
// slow. (A newcomer read "within 100ms (5 times WithNodeTimeout)".)
func TestSetUpMessageNamesItsBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3}, redlock.WithNodeTimeout(100*time.Millisecond))
	for _, nd := range f.Nodes[1:] {
		nd.Pause()
		t.Cleanup(nd.Resume)
	}
	_, err := f.rl.Acquire(context.Background(), []string{"setup-message"}, 10*time.Second, redlock.WithRetryCount(4))
	require.Error(t, err)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	seen := map[string]bool{}
	for _, a := range ee.Attempts {
		for _, why := range a.VotesAgainst {
			s := why.Error()
			if !strings.Contains(s, "no connection set up within") {
				continue
			}
			assert.Regexp(t, `no connection set up within (500ms|100ms): check that the node is up and that this host reaches it .*raise WithNodeTimeout \(a connection's set-up gets 5 node timeouts, one once the node was found slow`, s)
			seen[s[strings.Index(s, "within"):][:len("within 500ms")]] = true
		}
	}
	t.Logf("bounds reported: %v", seen)
	assert.True(t, seen["within 500ms"], "the first set-up's bound, 5 node timeouts, is reported")
}
