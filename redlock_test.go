package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// A long ttl, so that the PTTL checks are not racing expiry.
const long = time.Hour

// assertHeld checks that every listed node holds value under every key, with
// a ttl close to ttl. A call returns once a quorum has answered, so the other
// nodes are given a moment to catch up.
func assertHeld(t *testing.T, c *fixture, nodes []int, keys []string, value string, ttl time.Duration) {
	t.Helper()
	for _, i := range nodes {
		for _, k := range keys {
			var v string
			var p time.Duration
			ok := assert.Eventually(t, func() bool {
				v, p = c.Get(t, i, k), c.PTTL(t, i, k)
				return v == value && p > ttl-5*time.Second && p <= ttl
			}, 2*time.Second, time.Millisecond)
			if !ok {
				t.Errorf("node %d: GET %s = %q, PTTL %v; want %q and about %v", i, k, v, p, value, ttl)
			}
		}
	}
}

// assertExtendedOnQuorum checks that a quorum of the n nodes hold value
// under every key with a ttl close to ttl, and that every node holds value.
func assertExtendedOnQuorum(t *testing.T, c *fixture, n int, keys []string, value string, ttl time.Duration) {
	t.Helper()
	extended := func() (int, string) {
		count, seen := 0, ""
		for i := range n {
			ok := true
			for _, k := range keys {
				v, p := c.Get(t, i, k), c.PTTL(t, i, k)
				if v != value {
					t.Errorf("node %d: GET %s = %q, want %q", i, k, v, value)
				}
				if p <= ttl-5*time.Second || p > ttl {
					ok = false
				}
				seen += fmt.Sprintf(" node %d %s %v;", i, k, p)
			}
			if ok {
				count++
			}
		}
		return count, seen
	}
	var seen string
	if !assert.Eventually(t, func() bool {
		var count int
		count, seen = extended()
		return count >= n/2+1
	}, 2*time.Second, time.Millisecond) {
		t.Errorf("fewer than a quorum extended to %v:%s", ttl, seen)
	}
}

func allNodes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// node-redlock §9 cases 2, 3 and 10, on 1, 2, 3 and 5 nodes.
func TestAcquireExtendRelease(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 4, 5} {
		for _, keys := range [][]string{{"{redlock}a"}, {"{redlock}a1", "{redlock}a2"}} {
			t.Run(fmt.Sprintf("nodes=%d/keys=%d", n, len(keys)), func(t *testing.T) {
				c := newNodes(t, n)
				ctx := context.Background()
				lock, err := c.rl.Acquire(ctx, keys, long)
				require.NoError(t, err, "Acquire(%q)", keys)
				assert.Regexp(t, `^[0-9a-f]{32}@.+/[0-9]+$`, lock.Value(), "32 random hex characters, then host/pid")
				assert.Equal(t, redlock.DefaultIdentity(), redlock.IdentityOf(lock.Value()))
				assert.Equal(t, keys, lock.Resources())
				assert.True(t, lock.Valid())
				left := time.Until(lock.Expiration())
				assert.True(t, left > long-time.Minute && left < long, "Expiration in %v, want just under %v", left, long)
				require.Len(t, lock.Attempts(), 1)
				st := lock.Attempts()[0]
				assert.Equal(t, n, st.MembershipSize)
				assert.Equal(t, n/2+1, st.QuorumSize)
				assert.GreaterOrEqual(t, len(st.VotesFor), n/2+1)
				assertHeld(t, c, allNodes(n), keys, lock.Value(), long)

				ext, err := lock.Extend(ctx, 3*long)
				require.NoError(t, err, "Extend")
				assert.Equal(t, lock.Value(), ext.Value())
				assert.NotSame(t, lock, ext)
				assert.True(t, lock.Expiration().IsZero(), "old lock's Expiration = %v, want zero (spent)", lock.Expiration())
				assert.False(t, lock.Valid())
				// An extend returns at a quorum; a node that had not sent it
				// by then is not sent it at all (nothing to undo), and keeps
				// the value under its older ttl.
				assertExtendedOnQuorum(t, c, n, keys, lock.Value(), 3*long)

				// The extended handle cannot be extended again, but
				// releasing through it releases the extension (the
				// deferred-Release idiom), and spends every handle.
				_, err = lock.Extend(ctx, long)
				assert.ErrorIs(t, err, redlock.ErrLockExpired, "Extend(extended handle)")
				res, err := lock.Release(ctx)
				require.NoError(t, err, "Release through the first handle")
				assert.NotEmpty(t, res.Attempts)
				assert.False(t, ext.Valid(), "the extension is released too")
				for i := range n {
					for _, k := range keys {
						c.gone(t, i, k)
					}
				}
				_, err = ext.Release(ctx)
				assert.ErrorIs(t, err, redlock.ErrLockExpired, "second Release")
			})
		}
	}
}

// node-redlock §9 case 4: every node unreachable. The error matches neither
// sentinel, and every attempt is recorded.
func TestUnreachableNodes(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	for _, nd := range nodes {
		nd.Kill()
	}
	c := newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{MaxRetries: -1, DialTimeout: 50 * time.Millisecond}}, fast...)
	_, err := c.rl.Acquire(context.Background(), []string{"{redlock}a"}, time.Second)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee, "Acquire on dead nodes")
	assert.Len(t, ee.Attempts, 11)
	for _, a := range ee.Attempts {
		assert.Empty(t, a.VotesFor)
		assert.Len(t, a.VotesAgainst, 2, "an attempt is decided once a quorum is out of reach")
		for _, v := range a.VotesAgainst {
			var rle *redlock.ResourceLockedError
			assert.False(t, errors.As(v, &rle), "vote %v is not contention", v)
		}
	}
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	assert.NotErrorIs(t, err, redlock.ErrLockExpired)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
}

// node-redlock §9 case 5.
func TestLocksExpire(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := context.Background()
	first, err := c.rl.Acquire(ctx, []string{"{redlock}e"}, 200*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	assert.False(t, first.Valid())
	second, err := c.rl.Acquire(ctx, []string{"{redlock}e"}, 200*time.Millisecond, redlock.WithRetryCount(0))
	require.NoError(t, err, "Acquire after the first lock expired")
	assert.NotEqual(t, first.Value(), second.Value())
	_, err = second.Release(ctx)
	require.NoError(t, err)
	c.gone(t, 0, "{redlock}e")
}

// node-redlock §9 case 6, plus the sentinel it lacked.
func TestLocksAreExclusive(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3, fast...)
	ctx := context.Background()
	held, err := c.rl.Acquire(ctx, []string{"{redlock}x"}, long)
	require.NoError(t, err)
	_, err = c.rl.Acquire(ctx, []string{"{redlock}x"}, long)
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "second Acquire")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	assert.Len(t, ee.Attempts, 11)
	for _, a := range ee.Attempts {
		for _, v := range a.VotesAgainst {
			var rle *redlock.ResourceLockedError
			assert.ErrorAs(t, v, &rle, "vote against")
		}
	}
	// A call returns at quorum, so the first lock's write to the third node
	// may land after the second Acquire's attempt there: a quorum is what
	// must hold it, and no node may hold the loser's value.
	holding := 0
	for i := range 3 {
		switch v := c.Get(t, i, "{redlock}x"); v {
		case held.Value():
			holding++
		case "":
		default:
			t.Errorf("node %d holds %q, neither the lock's value nor empty", i, v)
		}
	}
	assert.GreaterOrEqual(t, holding, 2, "nodes holding the first lock")
	_, err = held.Release(ctx)
	require.NoError(t, err)
	c.gone(t, 1, "{redlock}x")
}

// node-redlock §9 case 7: all-or-nothing.
func TestOverlappingMultiLocks(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3, fast...)
	ctx := context.Background()
	held, err := c.rl.Acquire(ctx, []string{"{redlock}c1", "{redlock}c2"}, long)
	require.NoError(t, err)
	_, err = c.rl.Acquire(ctx, []string{"{redlock}c2", "{redlock}c3"}, long)
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	// A quorum holds the first lock (a call returns at quorum, so the
	// third node may have seen the second Acquire first), and c3 is left on
	// no node once the failed attempts' cleanup has landed.
	holding := 0
	for i := range 3 {
		if c.Get(t, i, "{redlock}c1") == held.Value() && c.Get(t, i, "{redlock}c2") == held.Value() {
			holding++
		}
		c.gone(t, i, "{redlock}c3")
	}
	assert.GreaterOrEqual(t, holding, 2, "nodes holding the first lock")
	_, err = held.Release(ctx)
	require.NoError(t, err)
	for i := range 3 {
		for _, k := range []string{"{redlock}c1", "{redlock}c2", "{redlock}c3"} {
			c.gone(t, i, k)
		}
	}
}

// node-redlock §9 case 11: a minority held by someone else.
func TestMinorityFails(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := context.Background()
	c.Set(t, 2, "{redlock}b", "other", 0)
	lock, err := c.rl.Acquire(ctx, []string{"{redlock}b"}, long)
	require.NoError(t, err)
	assertHeld(t, c, []int{0, 1}, []string{"{redlock}b"}, lock.Value(), long)
	assert.Equal(t, "other", c.Get(t, 2, "{redlock}b"))
	assert.Equal(t, time.Duration(-1), c.PTTL(t, 2, "{redlock}b"))

	lock, err = lock.Extend(ctx, 3*long)
	require.NoError(t, err)
	assertHeld(t, c, []int{0, 1}, []string{"{redlock}b"}, lock.Value(), 3*long)
	assert.Equal(t, "other", c.Get(t, 2, "{redlock}b"))

	_, err = lock.Release(ctx)
	require.NoError(t, err)
	c.gone(t, 0, "{redlock}b")
	c.gone(t, 1, "{redlock}b")
	assert.Equal(t, "other", c.Get(t, 2, "{redlock}b"))
}

// node-redlock §9 case 12: a majority held by others; the cleanup removes
// what the attempts wrote on the free node.
func TestMajorityFails(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reported []error
	c := newNodes(t, 3, append(fast, redlock.WithErrorHandler(func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))...)
	c.Set(t, 1, "{redlock}c", "other1", 0)
	c.Set(t, 2, "{redlock}c", "other2", 0)
	_, err := c.rl.Acquire(context.Background(), []string{"{redlock}c"}, long)
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	assert.Len(t, ee.Attempts, 11)
	for _, a := range ee.Attempts {
		require.NotEmpty(t, a.VotesAgainst)
		for _, v := range a.VotesAgainst {
			assert.Equal(t, "held by another lock", errors.Unwrap(v).Error())
		}
	}
	c.gone(t, 0, "{redlock}c") // the cleanup
	assert.Equal(t, "other1", c.Get(t, 1, "{redlock}c"))
	assert.Equal(t, "other2", c.Get(t, 2, "{redlock}c"))

	// Every vote against reached the handler, each as a *NodeError. Late
	// votes of the cleanup may still be on their way.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) >= 22
	}, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, e := range reported {
		var ne *redlock.NodeError
		assert.ErrorAs(t, e, &ne)
	}
}

// node-redlock's unmerged case 13: a waiter gets the lock once it is freed.
func TestWaiterAcquiresAfterRelease(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := context.Background()
	held, err := c.rl.Acquire(ctx, []string{"{redlock}d"}, long)
	require.NoError(t, err)
	got, fail, _ := waitFor(c.rl, "{redlock}d", redlock.WithRetryDelay(20*time.Millisecond), redlock.WithWakeOnRelease(false))
	time.Sleep(100 * time.Millisecond)
	_, err = held.Release(ctx)
	require.NoError(t, err)
	l := awaitLock(t, got, fail, 10*time.Second, "waiting Acquire did not get the lock after it was released")
	assert.NotEqual(t, held.Value(), l.Value())
	// The nodes that voted for hold it. A third node may have answered
	// "held" before the release's delete reached it, as the waiter's
	// attempt can win at quorum first.
	won := l.Attempts()[len(l.Attempts())-1].VotesFor
	assert.GreaterOrEqual(t, len(won), 2)
	assertHeld(t, c, won, []string{"{redlock}d"}, l.Value(), time.Minute)
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// Fixed: with an even n a 2:2 split is decided at once (node-redlock hangs
// for ever here, as on a 1:1 split of 2 nodes).
func TestEvenSplitDoesNotHang(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 4)
	c.Set(t, 2, "{redlock}s", "other", 0)
	c.Set(t, 3, "{redlock}s", "other", 0)
	ctx := within(t, 10*time.Second)
	_, err := c.rl.Acquire(ctx, []string{"{redlock}s"}, long, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "Acquire on a 2:2 split")
	require.NoError(t, ctx.Err(), "Acquire returned only when the test's bound ended it")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Len(t, ee.Attempts, 1)
	assert.Equal(t, 3, ee.Attempts[0].QuorumSize)
	c.gone(t, 0, "{redlock}s") // the nodes the attempt won are cleaned up
	c.gone(t, 1, "{redlock}s")
}

// Fixed: a retry is not refused by the node the previous attempt won
// (node-redlock §4.6: it fails here although it could hold 2 of 3 nodes),
// because a failed attempt releases what it wrote.
func TestRetryNotBlockedByEarlierAttempt(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	c.Set(t, 0, "{redlock}o", "other", 300*time.Millisecond) // frees up later
	c.Set(t, 2, "{redlock}o", "other", 0)                    // never frees up
	lock, err := c.rl.Acquire(within(t, 10*time.Second), []string{"{redlock}o"}, long,
		redlock.WithRetryDelay(100*time.Millisecond), redlock.WithRetryJitter(0))
	require.NoError(t, err, "Acquire after attempt 1 won node 1 only")
	require.Greater(t, len(lock.Attempts()), 1)
	last := lock.Attempts()[len(lock.Attempts())-1]
	assert.ElementsMatch(t, []int{0, 1}, last.VotesFor)
	assertHeld(t, c, []int{0, 1}, []string{"{redlock}o"}, lock.Value(), long)
	_, err = lock.Release(context.Background())
	require.NoError(t, err)
}

// Fixed: extend and release of a lock whose validity has passed end at once
// with ErrLockExpired, even with unlimited retries (node-redlock retries for
// 2 s, or for ever with -1).
func TestExpiredLockEndsAtOnce(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := within(t, 10*time.Second)
	lock, err := c.rl.Acquire(ctx, []string{"{redlock}x"}, 50*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)

	_, err = lock.Extend(ctx, long, redlock.WithRetryCount(-1))
	require.ErrorIs(t, err, redlock.ErrLockExpired, "Extend(expired)")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	assert.Empty(t, ee.Attempts, "an expired lock is not extended: nothing is sent")

	_, err = lock.Release(ctx, redlock.WithRetryCount(-1))
	require.ErrorIs(t, err, redlock.ErrLockExpired, "Release(expired)")
	require.NoError(t, ctx.Err())
}

// Fixed: a lock whose keys were taken over is known lost at the first
// attempt: release and extend do not retry.
func TestStolenLockEndsAtOnce(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := within(t, 10*time.Second)
	lock, err := c.rl.Acquire(ctx, []string{"{redlock}x"}, long)
	require.NoError(t, err)
	for i := range 3 {
		c.Set(t, i, "{redlock}x", "thief", 0)
	}
	_, err = lock.Extend(ctx, long, redlock.WithRetryCount(-1))
	require.ErrorIs(t, err, redlock.ErrLockExpired, "Extend(stolen)")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	assert.Len(t, ee.Attempts, 1)

	_, err = lock.Release(ctx, redlock.WithRetryCount(-1))
	require.ErrorIs(t, err, redlock.ErrLockExpired, "Release(stolen)")
	for i := range 3 {
		assert.Equal(t, "thief", c.Get(t, i, "{redlock}x"), "node %d: release must not delete another holder's key", i)
	}
}

// Fixed: a quorum reached only after the validity has passed is a failure,
// and what it wrote is cleaned up (node-redlock returns an expired Lock).
func TestLateQuorumIsFailure(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3, redlock.WithNodeTimeout(time.Second))
	for _, cl := range c.Clients {
		cl.AddHook(hook{onCmd: func(redis.Cmder) { time.Sleep(30 * time.Millisecond) }})
	}
	// ttl 20ms, drift 2ms: the attempt takes 30ms, past its validity. The
	// node timeout is capped at the validity, so the nodes time out.
	_, err := c.rl.Acquire(context.Background(), []string{"{redlock}late"}, 20*time.Millisecond, redlock.WithRetryCount(0))
	require.Error(t, err, "Acquire slower than its ttl")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Len(t, ee.Attempts, 1)

	// With a larger ttl the timeout is not the limit but the validity is:
	// ttl 40ms, drift 2ms, validity 38ms; nodes answer at about 30-40ms.
	for _, cl := range c.Clients {
		cl.AddHook(hook{onCmd: func(redis.Cmder) { time.Sleep(15 * time.Millisecond) }})
	}
	_, err = c.rl.Acquire(context.Background(), []string{"{redlock}late"}, 40*time.Millisecond, redlock.WithRetryCount(0))
	require.Error(t, err, "Acquire whose quorum arrives after its validity")
	for i := range 3 {
		c.gone(t, i, "{redlock}late") // the cleanup
	}
}

// Fixed: a hung minority (SIGSTOPped redis-server, clients with no timeout of
// their own) stalls no call: each returns as soon as the healthy nodes give a
// quorum, well before the per-node timeout.
func TestHungMinorityDoesNotStall(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	c := newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{ReadTimeout: -1, WriteTimeout: -1}}, redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	// Warm the connections so that the pause hits a connected client.
	l, err := c.rl.Acquire(ctx, []string{"{redlock}warm"}, long)
	require.NoError(t, err)
	_, err = l.Release(ctx)
	require.NoError(t, err)

	nodes[2].Pause()
	t.Cleanup(nodes[2].Resume)
	begin := time.Now()
	lock, err := c.rl.Acquire(ctx, []string{"{redlock}h"}, long)
	require.NoError(t, err, "Acquire with node 2 hung")
	assert.ElementsMatch(t, []int{0, 1}, lock.Attempts()[0].VotesFor)
	lock, err = lock.Extend(ctx, long)
	require.NoError(t, err, "Extend with node 2 hung")
	_, err = lock.Release(ctx)
	require.NoError(t, err, "Release with node 2 hung")
	elapsed := time.Since(begin)
	assert.Less(t, elapsed, 5*time.Second, "three calls with one node hung took %v; the node timeout is 10s", elapsed)
	nodes[2].Resume()
}

// Fixed: a hung majority fails within the per-node timeout, naming the nodes
// that did not answer, even though the clients have no timeout of their own.
func TestHungMajorityFailsAtTimeout(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	c := newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{ReadTimeout: -1, WriteTimeout: -1}}, redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := within(t, 20*time.Second)
	l, err := c.rl.Acquire(ctx, []string{"{redlock}warm"}, long)
	require.NoError(t, err)
	_, err = l.Release(ctx)
	require.NoError(t, err)

	nodes[1].Pause()
	nodes[2].Pause()
	t.Cleanup(nodes[1].Resume)
	t.Cleanup(nodes[2].Resume)
	_, err = c.rl.Acquire(ctx, []string{"{redlock}h"}, long, redlock.WithRetryCount(0))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "Acquire was ended by the test's bound, not the node timeout")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	timedOut := map[int]bool{}
	for _, v := range ee.Attempts[0].VotesAgainst {
		var te *redlock.NodeTimeoutError
		if errors.As(v, &te) {
			timedOut[v.Node] = true
		}
	}
	assert.Equal(t, map[int]bool{1: true, 2: true}, timedOut, "nodes reported as timed out")
	nodes[1].Resume()
	nodes[2].Resume()
}

// ctx ends a call promptly, and the error matches both ctx's error and the
// sentinel of what it was waiting for.
func TestContextEndsCall(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	held, err := c.rl.Acquire(context.Background(), []string{"{redlock}w"}, long)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	_, err = c.rl.Acquire(ctx, []string{"{redlock}w"}, long, redlock.WithRetryCount(-1), redlock.WithRetryDelay(20*time.Millisecond))
	assert.ErrorIs(t, err, context.Canceled, "Acquire cut short")
	assert.ErrorIs(t, err, redlock.ErrResourceLocked, "Acquire cut short while the lock was held")

	// A ctx that has already ended sends nothing.
	_, err = c.rl.Acquire(ctx, []string{"{redlock}other"}, long)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "", c.Get(t, 0, "{redlock}other"))
	// A Release with an ended ctx still makes one attempt (the deferred
	// Release behind a request deadline).
	_, err = held.Release(ctx)
	require.NoError(t, err, "Release with an ended ctx")
	assert.False(t, held.Valid())
	for i := range 3 {
		c.gone(t, i, "{redlock}w")
	}
}

// A quorum lost to node failures matches neither sentinel.
func TestQuorumLostToFailures(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	c := newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{MaxRetries: -1}}, fast...)
	ctx := context.Background()
	lock, err := c.rl.Acquire(ctx, []string{"{redlock}f"}, long)
	require.NoError(t, err)
	nodes[1].Kill()
	nodes[2].Kill()
	_, err = lock.Extend(ctx, long, redlock.WithRetryCount(2))
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrLockExpired)
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	assert.True(t, lock.Valid(), "a failed extension leaves the lock as it was")
	_, err = lock.Release(ctx, redlock.WithRetryCount(0))
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrLockExpired)
	_, err = c.rl.Acquire(ctx, []string{"{redlock}g"}, long, redlock.WithRetryCount(0))
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
}

// EVALSHA falls back to EVAL when a node lost its script cache.
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := context.Background()
	l, err := c.rl.Acquire(ctx, []string{"{redlock}s"}, long)
	require.NoError(t, err)
	for _, p := range c.Peek {
		require.NoError(t, p.ScriptFlush(ctx).Err())
	}
	l, err = l.Extend(ctx, long)
	require.NoError(t, err, "Extend after SCRIPT FLUSH")
	for _, p := range c.Peek {
		require.NoError(t, p.ScriptFlush(ctx).Err())
	}
	_, err = l.Release(ctx)
	require.NoError(t, err, "Release after SCRIPT FLUSH")
}

// One Redlock used from many goroutines at once: distinct keys all succeed,
// one shared key is never held twice (run with -race). Half the callers of
// the shared key try once, half wait: a try-once caller is promised only
// that it holds the lock alone when it gets it (contenders can split the
// nodes so that none wins), so that callers get the lock at all is counted
// on the waiting ones, each of which must get it every time.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var inside, violations, waited atomic.Int32
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				l, err := c.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}k%d-%d", g, i)}, long)
				if !assert.NoError(t, err) {
					return
				}
				_, err = l.Release(ctx)
				assert.NoError(t, err)

				tries := redlock.WithRetryCount(0)
				if g%2 == 1 {
					tries = redlock.WithRetryCount(-1)
				}
				l, err = c.rl.Acquire(ctx, []string{"{redlock}shared"}, long, tries, redlock.WithRetryDelay(5*time.Millisecond))
				if err != nil {
					if g%2 == 1 {
						assert.NoError(t, err, "Acquire of the shared key, waiting")
						return
					}
					assert.ErrorIs(t, err, redlock.ErrResourceLocked)
					continue
				}
				if g%2 == 1 {
					waited.Add(1)
				}
				if inside.Add(1) > 1 {
					violations.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				_, err = l.Release(ctx)
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, violations.Load(), "two holders of one lock at once")
	assert.Equal(t, int32(8*20), waited.Load(), "waiting callers of the shared key that got it")
}

// Fixed: waiters on one resource never split the nodes between them. With
// partial holds kept across retries (node-redlock v5), 8 waiters with
// unlimited retries on 5 nodes each keep a node or two, refresh them on
// every retry, and none reaches a quorum until they give up. Each failed
// attempt now releases what it wrote, so every waiter gets its turn.
func TestWaitersDoNotSplitTheNodes(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 5)
	var inside, violations atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				l, err := c.rl.Acquire(ctx, []string{"{redlock}busy"}, 10*time.Second,
					redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Millisecond), redlock.WithRetryJitter(5*time.Millisecond))
				cancel()
				if !assert.NoError(t, err, "a waiter never got the lock") {
					return
				}
				if inside.Add(1) > 1 {
					violations.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				_, err = l.Release(context.Background())
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, violations.Load())
}

// Concurrent calls to one node are sent together in one pipeline. Under
// concurrency every call still gets its own answer: with the nodes' script
// caches flushed again and again (NOSCRIPT inside a pipeline), and with some
// callers cancelling, every other caller's Acquire and Release succeed.
func TestBatchedCalls(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	var pipelines atomic.Int32
	for _, cl := range c.Clients {
		cl.AddHook(hook{onPipeline: func([]redis.Cmder) { pipelines.Add(1) }})
	}
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				for _, p := range c.Peek {
					_ = p.ScriptFlush(context.Background()).Err()
				}
			}
		}
	}()
	var wg sync.WaitGroup
	var done atomic.Int32
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				key := fmt.Sprintf("{redlock}b%d-%d", g, i)
				if g%4 == 3 { // a caller that gives up at once
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					_, err := c.rl.Acquire(ctx, []string{key}, time.Minute)
					assert.ErrorIs(t, err, context.Canceled)
					continue
				}
				l, err := c.rl.Acquire(context.Background(), []string{key}, time.Minute)
				if !assert.NoError(t, err, "Acquire(%s)", key) {
					return
				}
				assert.Equal(t, l.Value(), c.Get(t, l.Attempts()[len(l.Attempts())-1].VotesFor[0], key))
				_, err = l.Release(context.Background())
				assert.NoError(t, err, "Release(%s)", key)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-flushed
	assert.Equal(t, int32(12*30), done.Load())
	assert.Positive(t, pipelines.Load(), "concurrent calls were sent as pipelines")
}
