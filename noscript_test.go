package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
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
