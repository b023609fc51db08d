package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// Regression test for a defect a probe found (issue 27).
//
// Two concurrent Releases of one lock (the same handle twice, or a handle
// and its extension: documented as releasing the same lock) while waiters
// wait. Before hand-over, a concurrent double release was harmless (both
// delete). With it, each Release may hand the lock over (two waiters get the
// same value, both Valid), or one hands it over while the other deletes it
// for real (the new holder is Valid with no key on any node).
func TestHandOverConcurrentDoubleRelease(t *testing.T) {
	t.Parallel()
	for _, waiters := range []int{2, 1} {
		t.Run(map[int]string{2: "two waiters", 1: "one waiter"}[waiters], func(t *testing.T) {
			f := newNodes(t, 3) // default options
			ctx := context.Background()
			doubles, handPlusDelete := 0, 0
			var other *redlock.Redlock
			const rounds = 300
			for round := range rounds {
				key := "dbl"
				t0 := time.Now()
				a, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
				require.NoError(t, err)
				h2 := a
				if round%2 == 1 {
					h2, err = a.Extend(ctx, 10*time.Second)
					require.NoError(t, err)
				}
				var ws []<-chan acquired
				for i := range waiters {
					ws = append(ws, handWait(f.rl, key, 10*time.Second, redlock.WithRetryDelay(2*time.Second)))
					queued(t, f.rl, key, i+1)
				}
				var wg sync.WaitGroup
				start := make(chan struct{})
				var res [2]*redlock.ExecutionResult
				var errs [2]error
				for i, h := range []*redlock.Lock{a, h2} {
					spawn(&wg, func() { <-start; res[i], errs[i] = h.Release(ctx) })
				}
				close(start)
				wg.Wait()
				handed, ok := 0, 0
				for i := range 2 {
					if errs[i] == nil {
						ok++
						if res[i].HandedOver {
							handed++
						}
					}
				}
				var gots []acquired
				for wi, w := range ws {
					var g acquired
					select {
					case g = <-w:
					case <-time.After(15 * time.Second):
						t.Fatalf("round %d: waiter %d never returned: results %+v %+v errs %v %v, queued %d, nodes hold %q (lock value %s), PTTL %v",
							round, wi, res[0], res[1], errs[0], errs[1], redlock.QueuedWaiters(f.rl, []string{key}), f.holders(t, key), a.Value(), f.PTTL(t, 0, key))
					}
					require.NoError(t, g.err)
					gots = append(gots, g)
					if handed < 2 {
						// A holder handed over by only one Release: let it go, so the next waiter gets its turn.
						if g.l.Value() == a.Value() && g.l.Valid() && handed == 1 && ok == 2 {
							handPlusDelete++
							if handPlusDelete <= 3 {
								t.Logf("round %d: one Release handed over, the other deleted: new holder Valid=%v, nodes hold %q (holder value %s)",
									round, g.l.Valid(), f.holders(t, key), g.l.Value())
								if other == nil {
									other, _ = ownRedlock(t, f, viaF)
								}
								if ol, err := other.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(0)); err == nil {
									t.Logf("round %d: another process acquired %s while the handed-over holder is Valid=%v", round, key, g.l.Valid())
									_, _ = ol.Release(ctx)
								}
							}
						}
						_, _ = g.l.Release(ctx, redlock.WithHandOver(0, 0))
					}
				}
				switch {
				case handed == 2:
					doubles++
					if doubles <= 3 {
						t.Logf("round %d: BOTH Releases handed over: two holders, Valid=%v,%v, same value=%v, nodes hold %q",
							round, gots[0].l.Valid(), gots[1].l.Valid(), gots[0].l.Value() == gots[1].l.Value(), f.holders(t, key))
					}
				}
				if handed == 2 {
					for _, g := range gots {
						_, _ = g.l.Release(ctx, redlock.WithHandOver(0, 0))
					}
				}
				if d := time.Since(t0); d > 500*time.Millisecond {
					t.Logf("round %d took %v (handed %d ok %d)", round, d, handed, ok)
				}
			}
			t.Logf("%d rounds: %d with both Releases handing over, %d with a hand-over and a real release both succeeding", rounds, doubles, handPlusDelete)
			if doubles > 0 || handPlusDelete > 0 {
				t.Errorf("concurrent Releases of one lock: %d double hand-overs, %d hand-over + real delete", doubles, handPlusDelete)
			}
		})
	}
}
