package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/internal/script"
)

// TestResentScriptsKeepTheBatchOrder: a node slower than the quorum gets a
// lock's acquire and release (and, fenced, its write-back) in one batch,
// and has the release script cached but not the acquire's: a deployment
// that turns fencing on, or a node whose scripts were flushed and that has
// run a release since. The node answers NOSCRIPT to the acquire; its
// re-send with the script must not run it after the release, which would
// leave the released lock on the node for its whole ttl. (Issue 22: the
// next Acquire of the resource, with one other node partitioned, then
// waited 5.4 s for a lock that had been released.)
func TestResentScriptsKeepTheBatchOrder(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "plain after SCRIPT FLUSH"}[fenced]
		t.Run(name, func(t *testing.T) {
			f := newProxied(t, 3, redlock.WithNodeTimeout(time.Second))
			ctx := context.Background()
			busy, err := f.rl.Acquire(ctx, []string{"busy"}, 10*time.Second)
			require.NoError(t, err)
			if !fenced {
				// Node 0 forgets every script; busy's release, the slow
				// call below, loads the release script again, not the
				// acquire script.
				require.NoError(t, f.Peek[0].ScriptFlush(ctx).Err())
			}
			f.Proxies[0].SetLatency(50*time.Millisecond, 50*time.Millisecond)
			var wg sync.WaitGroup
			// Keeps node 0's lane busy for a round trip of 100ms, so that
			// q's calls queue there behind it and go out in one batch.
			spawn(&wg, func() { _, _ = busy.Release(ctx) })
			time.Sleep(20 * time.Millisecond)
			l, err := f.rl.Acquire(ctx, []string{"q"}, 10*time.Second, redlock.WithFencing(fenced))
			require.NoError(t, err, "Acquire(q): nodes 1 and 2 are fast")
			_, err = l.Release(ctx)
			require.NoError(t, err, "Release(q)")
			wg.Wait()
			// Close waits for every call still in flight: node 0 has run
			// all it was sent.
			require.NoError(t, f.rl.Close())
			for i := range 3 {
				for _, key := range []string{"q", "busy"} {
					assert.Empty(t, f.Get(t, i, key), "%s left on node %d after its Release", key, i)
				}
			}
		})
	}
}

// A node slower than its node timeout lacks the acquire script: its batch
// goes silent, the breaker opens, the lock's release is held and sent again
// as the breaker's probe, on another connection, before the detached worker
// learns of the NOSCRIPT. The acquire must not be sent again then: it would
// write the released lock after its release, to stay its whole ttl. (Found by
// a probe: 4 of 4 runs left the lock at 110 and 150 ms each way.)
func TestSilentBatchSendsNoAcquireAgain(t *testing.T) {
	t.Parallel()
	for _, lat := range []time.Duration{110 * time.Millisecond, 150 * time.Millisecond} {
		t.Run(lat.String(), func(t *testing.T) {
			f := newProxied(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
			ctx := context.Background()
			w, err := f.rl.Acquire(ctx, []string{"w"}, 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, f.Peek[0].ScriptFlush(ctx).Err())
			_, err = w.Release(ctx) // node 0 has the release script again, not the acquire's
			require.NoError(t, err)
			var wg sync.WaitGroup
			for range 8 { // warm connections on node 0, for the probe to take
				spawn(&wg, func() { _ = f.Client(0).Do(ctx, "DEBUG", "SLEEP", "0.05").Err() })
			}
			wg.Wait()
			f.Proxies[0].SetLatency(lat, lat)
			l, err := f.rl.Acquire(ctx, []string{"k"}, 10*time.Second)
			require.NoError(t, err)
			_, err = l.Release(ctx)
			require.NoError(t, err)
			time.Sleep(4 * lat) // the held release goes out as the probe; the silent batch answers
			require.NoError(t, f.rl.Close())
			for i := range 3 {
				assert.Empty(t, f.Get(t, i, "k"), "k left on node %d after its Release", i)
			}
		})
	}
}

// A release sent again only to run after a re-sent acquire (see
// TestResentScriptsKeepTheBatchOrder) had deleted its lock in its first
// run; the answer to its second run is lost (the connection is cut once the
// node has run it). The release still counts for that node: with node 1
// partitioned, nodes 0 and 2 deleted the lock, a quorum. (Found by a probe:
// Release said "no longer held" on 3 of 3 runs; before the re-send kept the
// order it succeeded.)
func TestLostAnswerOfAResendKeepsTheRelease(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithNodeTimeout(time.Second), redlock.WithRetryCount(3), redlock.WithRetryDelay(50*time.Millisecond))
	ctx := context.Background()
	var armed atomic.Bool
	f.Client(0).AddHook(hook{onPipeline: func(cmds []redis.Cmder) {
		// The re-send round: cut its answers on their way back.
		if armed.Load() && len(cmds) > 1 && cmds[0].Name() == "eval" {
			armed.Store(false)
			time.AfterFunc(120*time.Millisecond, f.Proxies[0].Cut)
		}
	}})
	busy, err := f.rl.Acquire(ctx, []string{"busy"}, 10*time.Second)
	require.NoError(t, err)
	b, err := f.rl.Acquire(ctx, []string{"k"}, 10*time.Second)
	require.NoError(t, err)
	w, err := f.rl.Acquire(ctx, []string{"w"}, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, f.Peek[0].ScriptFlush(ctx).Err())
	_, err = w.Release(ctx) // node 0 has the release script again, not the acquire's
	require.NoError(t, err)
	// w's release returned at a quorum: node 0's may still be on its way.
	// Until it has run, node 0 lacks the release script too, and B's
	// release would be re-sent with the acquire, its first run a NOSCRIPT:
	// a lost answer then leaves node 0's delete unknowable (a run of this
	// test under load failed so, 4 of 60).
	require.Eventually(t, func() bool {
		ok, err := f.Peek[0].ScriptExists(ctx, script.Release.Hash).Result()
		return err == nil && ok[0]
	}, 5*time.Second, time.Millisecond, "node 0 has the release script again")
	f.Proxies[1].Set(redistest.Partition)
	f.Proxies[0].SetLatency(50*time.Millisecond, 150*time.Millisecond)
	armed.Store(true)
	var wg sync.WaitGroup
	spawn(&wg, func() { _, _ = busy.Release(ctx) }) // keeps node 0's lane busy
	time.Sleep(20 * time.Millisecond)
	spawn(&wg, func() { // A's acquire of k queues on node 0 before B's release
		_, _ = f.rl.Acquire(ctx, []string{"k"}, 10*time.Second, redlock.WithRetryCount(0))
	})
	time.Sleep(10 * time.Millisecond)
	_, err = b.Release(ctx)
	assert.NoError(t, err, "Release(B): nodes 0 and 2 deleted it")
	wg.Wait()
	f.Proxies[0].Heal()
	f.Proxies[1].Heal()
	require.NoError(t, f.rl.Close())
	assert.Empty(t, f.Get(t, 2, "k"), "node 2")
}
