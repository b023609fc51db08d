package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// BenchmarkAcquireRelease measures one Acquire and one Release of a single
// resource on 1, 3 and 5 real local redis-server nodes.
//
//	go test -run '^$' -bench . -benchmem
func BenchmarkAcquireRelease(b *testing.B) {
	benchAcquireRelease(b)
}

// BenchmarkAcquireReleaseFenced is BenchmarkAcquireRelease with fencing
// tokens: one more round trip per Acquire (the token's write-back).
func BenchmarkAcquireReleaseFenced(b *testing.B) {
	benchAcquireRelease(b, redlock.WithFencing(true))
}

// BenchmarkAcquireReleasePermits is BenchmarkAcquireRelease with a
// semaphore of 8 permits (WithPermits): the acquire reads the 8 permit keys.
func BenchmarkAcquireReleasePermits(b *testing.B) {
	benchAcquireRelease(b, redlock.WithPermits(8))
}

// BenchmarkAcquireReleaseShared is BenchmarkAcquireRelease with a shared
// lock (WithShared): a reader in a sorted set beside the resource.
func BenchmarkAcquireReleaseShared(b *testing.B) {
	benchAcquireRelease(b, redlock.WithShared(true))
}

func benchAcquireRelease(b *testing.B, opts ...redlock.Option) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			rl := benchRedlock(b, n)
			acquireReleaseLoop(b, rl, "bench", opts...)
		})
	}
}

// BenchmarkExtend measures one Extend on 3 nodes.
func BenchmarkExtend(b *testing.B) {
	rl := benchRedlock(b, 3)
	ctx := context.Background()
	l, err := rl.Acquire(ctx, []string{"bench-extend"}, 10*time.Second)
	if err != nil {
		b.Fatalf("Acquire = %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if l, err = l.Extend(ctx, 10*time.Second); err != nil {
			b.Fatalf("Extend = %v", err)
		}
	}
	b.StopTimer()
	_, _ = l.Release(ctx)
}

// BenchmarkUsingExtension measures one extension made by Using on 3 nodes
// (its timer, its Extend call and its context), over the extensions made
// while 50 calls of Using hold 50 locks: a ttl of 300 ms with a threshold
// of 195 ms extends each every 100 ms or so. An observer counts them (its
// Done hook allocates too); the acquires and releases count once in all.
// ns/op is the time between extensions, not their cost.
//
//	go test -run '^$' -bench BenchmarkUsingExtension -benchmem -benchtime 2000x .
func BenchmarkUsingExtension(b *testing.B) {
	const holders = 50
	var n atomic.Int64
	want, reached := int64(b.N), make(chan struct{})
	obs := &redlock.Observer{Done: func(ci redlock.CallInfo) {
		if ci.Op == redlock.OpExtend && n.Add(1) == want {
			close(reached)
		}
	}}
	rl := newNodes(b, 3, redlock.WithObserver(obs)).rl
	b.ReportAllocs()
	b.ResetTimer()
	errs := make(chan error, holders)
	for i := range holders {
		go func() {
			errs <- rl.Using(context.Background(), []string{fmt.Sprint("bench-using:", i)}, 300*time.Millisecond, func(ctx context.Context) error {
				select {
				case <-reached:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}, redlock.WithAutomaticExtensionThreshold(195*time.Millisecond))
		}()
	}
	for range holders {
		if err := <-errs; err != nil {
			b.Fatalf("Using = %v (after %d extensions)", err, n.Load())
		}
	}
	b.StopTimer()
}

// BenchmarkAcquireReleaseParallel measures Acquire+Release of distinct
// resources from many goroutines on 5 nodes.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	rl := benchRedlock(b, 5)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	var id atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		keys := []string{fmt.Sprintf("bench-par-%d", id.Add(1))}
		for pb.Next() {
			l, err := rl.Acquire(ctx, keys, 10*time.Second)
			if err != nil {
				b.Errorf("Acquire = %v", err)
				return
			}
			if _, err := l.Release(ctx); err != nil {
				b.Errorf("Release = %v", err)
				return
			}
		}
	})
}

// BenchmarkAcquireReleaseReplicaAck measures Acquire+Release on 3 primaries
// with a replica each, without and with WithReplicaAck(1, 100ms) (a WAIT
// after each acquire).
func BenchmarkAcquireReleaseReplicaAck(b *testing.B) {
	primaries, _ := redistest.StartWithReplicas(b, 3, 1)
	for _, bc := range []struct {
		name string
		opts []redlock.Option
	}{{"plain", nil}, {"ack=1", []redlock.Option{redlock.WithReplicaAck(1, 100*time.Millisecond), redlock.WithNodeTimeout(500 * time.Millisecond)}}} {
		b.Run(bc.name, func(b *testing.B) {
			rl := newFixture(b, redistest.Setup{On: primaries}, bc.opts...).rl
			acquireReleaseLoop(b, rl, "bench-ack")
		})
	}
}

// acquireReleaseLoop acquires and releases key on rl, b.N times, timed.
func acquireReleaseLoop(b *testing.B, rl *redlock.Redlock, key string, opts ...redlock.Option) {
	ctx := context.Background()
	keys := []string{key}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l, err := rl.Acquire(ctx, keys, 10*time.Second, opts...)
		if err != nil {
			b.Fatalf("Acquire = %v", err)
		}
		if _, err := l.Release(ctx); err != nil {
			b.Fatalf("Release = %v", err)
		}
	}
}

func benchRedlock(b *testing.B, n int) *redlock.Redlock {
	b.Helper()
	return newNodes(b, n).rl
}

// BenchmarkObserver measures Acquire+Release on 3 nodes with no observer,
// with an Observer whose hooks do nothing, against each other (the
// OpenTelemetry observer's figure is in the redlockotel module).
func BenchmarkObserver(b *testing.B) {
	nothing := &redlock.Observer{
		Attempt: func(redlock.AttemptInfo) {}, Wait: func(redlock.WaitInfo) {}, Vote: func(*redlock.NodeError) {},
		Done: func(redlock.CallInfo) {}, Lost: func(redlock.LostInfo) {}, Released: func(redlock.ReleasedInfo) {},
		Using: func(redlock.UsingInfo) {},
	}
	nodes := redistest.Start(b, 3)
	for _, bc := range []struct {
		name string
		opts []redlock.Option
	}{{"none", nil}, {"no-op", []redlock.Option{redlock.WithObserver(nothing)}}} {
		b.Run(bc.name, func(b *testing.B) {
			rl := newFixture(b, redistest.Setup{On: nodes}, bc.opts...).rl
			acquireReleaseLoop(b, rl, "bench-obs")
		})
	}
}

// BenchmarkIdentity measures Acquire+Release on 3 nodes with no identity
// in the value (WithIdentity("")), with the default (host/pid), and with
// the longest one, against each other on the same nodes (issue 33: what
// recording who holds a lock costs).
//
//	go test -run '^$' -bench '^BenchmarkIdentity$' -benchmem -count 8 .
func BenchmarkIdentity(b *testing.B) {
	nodes := redistest.Start(b, 3)
	for _, bc := range []struct{ name, id string }{
		{"none", ""}, {"default", redlock.DefaultIdentity()}, {"longest", strings.Repeat("x", redlock.MaxIdentity)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rl := newFixture(b, redistest.Setup{On: nodes}, redlock.WithIdentity(bc.id)).rl
			acquireReleaseLoop(b, rl, "bench-identity")
		})
	}
}
