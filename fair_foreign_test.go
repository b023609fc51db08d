package redlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// The fair queue beside clients that do not queue (issue 31): which of them
// wait behind the queue, which may overtake its head, and that none of them
// ever holds a resource at the same time as a waiter. See WithFairQueue's
// doc.

// node-redlock's scripts (v5; ../shared/research/node-redlock.md, 2.4): its
// acquire takes the keys only when none exists, its release deletes the
// keys that hold the lock's value. Neither reads the queues, and the release
// announces nothing. Sent with EVAL: a package-level redis.NewScript would
// hash them with crypto/sha1 at init, which panics under
// GODEBUG=fips140=only (.ci/run's FIPS step builds this package's tests).
const (
	nodeRedlockAcquire = `
for i, key in ipairs(KEYS) do if redis.call("exists", key) == 1 then return 0 end end
for i, key in ipairs(KEYS) do redis.call("set", key, ARGV[1], "PX", ARGV[2]) end
return #KEYS
`
	nodeRedlockRelease = `
local count = 0
for i, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then redis.pcall("del", key); count = count + 1 end
end
return count
`
)

// foreign locks a key as a client that writes it itself does, through a
// client of its own on each node, on a quorum: node-redlock's acquire script,
// or a bare SET NX PX (setNX); either releases with node-redlock's script,
// and so does a failed attempt, on every node.
type foreign struct {
	cs    []*redis.Client
	setNX bool
}

func newForeign(t *testing.T, f *fixture, setNX bool) *foreign {
	t.Helper()
	fc := &foreign{setNX: setNX}
	for _, c := range f.Clients {
		nc := redis.NewClient(&redis.Options{Addr: c.(*redis.Client).Options().Addr})
		fc.cs = append(fc.cs, nc)
		t.Cleanup(func() { _ = nc.Close() })
	}
	return fc
}

// acquire takes key for ttl on every node at once, and reports the value
// and whether a quorum took it.
func (fc *foreign) acquire(ctx context.Context, key string, ttl time.Duration) (string, bool) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	value := hex.EncodeToString(b)
	var won atomic.Int32
	var wg sync.WaitGroup
	for _, c := range fc.cs {
		spawn(&wg, func() {
			if fc.setNX {
				if c.Do(ctx, "SET", key, value, "NX", "PX", ttl.Milliseconds()).Err() == nil {
					won.Add(1)
				}
			} else if n, _ := c.Eval(ctx, nodeRedlockAcquire, []string{key}, value, ttl.Milliseconds()).Int(); n == 1 {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if int(won.Load()) > len(fc.cs)/2 {
		return value, true
	}
	fc.release(key, value)
	return "", false
}

// release deletes key where it holds value, on every node.
func (fc *foreign) release(key, value string) {
	var wg sync.WaitGroup
	for _, c := range fc.cs {
		spawn(&wg, func() { _ = c.Eval(context.Background(), nodeRedlockRelease, []string{key}, value).Err() })
	}
	wg.Wait()
}

// taker takes key, and returns its release, or false when it could not
// (ctx ended, or the key was held).
type taker func(ctx context.Context) (release func(), ok bool)

func (fc *foreign) taker(key string) taker {
	return func(ctx context.Context) (func(), bool) {
		v, ok := fc.acquire(ctx, key, 10*time.Second)
		return func() { fc.release(key, v) }, ok
	}
}

// plainTaker takes key with rl's plain Acquire, which waits (woken by
// releases) until ctx ends.
func plainTaker(t *testing.T, rl *redlock.Redlock, key string) taker {
	return func(ctx context.Context) (func(), bool) {
		l, err := rl.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(10*time.Millisecond))
		if err != nil {
			assert.Error(t, ctx.Err(), "plain Acquire(%q) = %v before the loop ended", key, err)
			return nil, false
		}
		return func() { _, _ = l.Release(context.Background()) }, true
	}
}

// witness counts the holders of one resource, and the times two held it
// at once.
type witness struct{ inside, overlaps atomic.Int32 }

func (w *witness) enter() {
	if w.inside.Add(1) > 1 {
		w.overlaps.Add(1)
	}
}

func (w *witness) leave() { w.inside.Add(-1) }

// looper takes a resource again and again in the background, as a busy
// client does: it holds it for a millisecond, releases it and takes it
// again at once (a refused attempt waits 5ms), until stopped.
type looper struct {
	grants atomic.Int64
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func startLoop(t *testing.T, take taker, w *witness) *looper {
	lp := &looper{}
	ctx, cancel := context.WithCancel(context.Background())
	lp.stop = cancel
	spawn(&lp.wg, func() {
		for ctx.Err() == nil {
			release, ok := take(ctx)
			if !ok {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			lp.grants.Add(1)
			w.enter()
			time.Sleep(time.Millisecond)
			w.leave()
			release()
		}
	})
	t.Cleanup(lp.end) // before the clients close
	return lp
}

// end stops the loop and returns once its last release has been answered.
func (lp *looper) end() {
	lp.stop()
	lp.wg.Wait()
}

// fairGrant is what a fair waiter's Acquire came to: when it returned, and
// the lock, already released (held 20ms inside the witness).
type fairGrant struct {
	at  time.Time
	l   *redlock.Lock
	err error
}

// fairHolds counts the nodes on which key holds value, or the id of a
// waiter of its queue (a node that handed key to the waiter holds its id,
// and the waiter stays queued until its release): never the value of a
// client that does not queue.
func fairHolds(t *testing.T, f *fixture, key, value string) int {
	n := 0
	for i, h := range f.holders(t, key) {
		if h == "" {
			continue
		}
		mine := h == value
		for _, m := range f.Peek[i].ZRange(context.Background(), fairQueue(key), 0, -1).Val() {
			mine = mine || strings.HasPrefix(m, h+":")
		}
		if mine {
			n++
		}
	}
	return n
}

// waitFair runs a fair Acquire of key by rl in the background (unlimited
// retries, within 30s): once granted, it checks that a quorum of nodes
// holds its lock, holds it for 20ms inside w and releases it. before runs
// just before the release.
func waitFair(t *testing.T, f *fixture, rl *redlock.Redlock, key string, w *witness, before func(), opts ...redlock.Option) <-chan fairGrant {
	ctx := within(t, 30*time.Second)
	got := make(chan fairGrant, 1)
	go func() {
		l, err := rl.Acquire(ctx, []string{key}, 10*time.Second, append([]redlock.Option{redlock.WithRetryCount(-1)}, opts...)...)
		g := fairGrant{at: time.Now(), l: l, err: err}
		if err == nil {
			w.enter()
			assert.GreaterOrEqual(t, fairHolds(t, f, key, l.Value()), 2, "nodes that hold %s for a fair waiter while it holds it", key)
			time.Sleep(20 * time.Millisecond)
			w.leave()
			if before != nil {
				before()
			}
			_, err := l.Release(context.Background())
			assert.NoError(t, err, "Release of the fair waiter's lock")
		}
		got <- g
	}()
	return got
}

// A client that writes the key itself (node-redlock, a bare SET NX PX) and
// takes it again as soon as it released it may overtake a queued fair
// waiter for as long as it loops: its release frees the key and announces
// nothing, and the waiter finds the key free only if one of its attempts
// (at least every third of its 1s liveness) falls in a gap. It never holds
// the key while the waiter does, and once it stops, the waiter gets the
// lock at its next attempt.
func TestFairQueueBesideForeignClients(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setNX bool
	}{{"node-redlock's scripts", false}, {"SET NX PX", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newNodes(t, 3)
			key := "foreign"
			var w witness
			lp := startLoop(t, newForeign(t, f, tc.setNX).taker(key), &w)
			require.Eventually(t, func() bool { return lp.grants.Load() > 0 }, 10*time.Second, time.Millisecond, "the foreign client took %s", key)
			fair, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
			began, before := time.Now(), lp.grants.Load()
			got := waitFair(t, f, fair, key, &w, nil)
			var g fairGrant
			select {
			case g = <-got: // one of its attempts found the key free
				t.Logf("the waiter got the lock while the foreign client looped, after %v and %d foreign grants", g.at.Sub(began), lp.grants.Load()-before)
			case <-time.After(time.Second):
				lp.end()
				stopped := time.Now()
				t.Logf("the foreign client took the lock %d times in 1s while the fair waiter queued", lp.grants.Load()-before)
				select {
				case g = <-got:
				case <-time.After(10 * time.Second):
					t.Fatal("the fair waiter did not get the lock after the foreign client stopped")
				}
				took := g.at.Sub(stopped)
				t.Logf("the waiter got the lock %v after the foreign client's last release", took)
				assert.Less(t, took, time.Second, "the waiter's next attempt comes within a third of its 1s liveness")
			}
			require.NoError(t, g.err, "the fair waiter's Acquire")
			lp.end()
			assert.Zero(t, w.overlaps.Load(), "the foreign client and the fair waiter held %s at once", key)
		})
	}
}

// A queued fair waiter is woken by a plain Release of this library, which
// announces the key it frees (WithWakeOnRelease), and takes the key at once;
// node-redlock's release announces nothing, and the waiter takes the key at
// its next attempt. Its node timeout of 1s makes its liveness 5s: it asks
// again every 1.67s.
func TestFairQueueHeadWokenByAnnouncedReleases(t *testing.T) {
	t.Parallel()
	const live = 5 * time.Second
	for _, tc := range []struct {
		name      string
		announced bool
	}{{"this library's plain Release", true}, {"node-redlock's release", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newNodes(t, 3)
			key := "woken"
			ctx := context.Background()
			var release func()
			if tc.announced {
				plain, _ := ownRedlock(t, f, viaF)
				l, err := plain.Acquire(ctx, []string{key}, 10*time.Second)
				require.NoError(t, err)
				release = func() { _, err := l.Release(ctx); require.NoError(t, err) }
			} else {
				fc := newForeign(t, f, false)
				v, ok := fc.acquire(ctx, key, 10*time.Second)
				require.True(t, ok, "node-redlock's acquire of %s", key)
				release = func() { fc.release(key, v) }
			}
			// On every node, so that the waiter queues on every node.
			require.Eventually(t, func() bool {
				h := f.holders(t, key)
				return h[0] != "" && h[0] == h[1] && h[1] == h[2]
			}, 10*time.Second, time.Millisecond, "%s held on every node", key)
			fair, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true), redlock.WithNodeTimeout(live/5))
			var w witness
			got := waitFair(t, f, fair, key, &w, nil, redlock.WithRetryDelay(time.Hour))
			queuedOnNodes(t, f, key, 1)
			released := time.Now()
			release()
			g := <-got
			require.NoError(t, g.err, "the fair waiter's Acquire")
			took := g.at.Sub(released)
			t.Logf("the waiter got the lock %v after %s", took, tc.name)
			if tc.announced {
				assert.Less(t, took, time.Second, "woken by the announcement, not at its next attempt (every %v)", live/3)
			} else {
				assert.Less(t, took, live/3+time.Second, "at its next attempt (every %v)", live/3)
			}
		})
	}
}

// A resource handed to a waiter holds the waiter's id: no client that does
// not queue takes it, node-redlock's, a bare SET NX and this library's plain
// Acquire alike, until the queue is empty. Three clients loop on the key
// while a fair holder hands it down a queue of two.
func TestFairQueueHandedResourcesShutOutOtherClients(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "handed"
	h, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
	require.NoError(t, err)
	var w witness
	w.enter()
	plain, _ := ownRedlock(t, f, viaF)
	loops := []*looper{
		startLoop(t, newForeign(t, f, false).taker(key), &w),
		startLoop(t, newForeign(t, f, true).taker(key), &w),
		startLoop(t, plainTaker(t, plain, key), &w),
	}
	overtakes := func() (n int64) {
		for _, lp := range loops {
			n += lp.grants.Load()
		}
		return n
	}
	first, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	second, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	got1 := waitFair(t, f, first, key, &w, nil, redlock.WithRetryDelay(time.Hour))
	queuedOnNodes(t, f, key, 1)
	var beforeLast int64 = -1
	got2 := waitFair(t, f, second, key, &w, func() { beforeLast = overtakes() }, redlock.WithRetryDelay(time.Hour))
	queuedOnNodes(t, f, key, 2)
	w.leave()
	_, err = h.Release(ctx)
	require.NoError(t, err)
	for _, got := range []<-chan fairGrant{got1, got2} {
		select {
		case g := <-got:
			require.NoError(t, g.err, "a fair waiter's Acquire")
		case <-time.After(10 * time.Second):
			t.Fatal("a fair waiter did not get the lock")
		}
	}
	assert.Zero(t, beforeLast, "grants to clients that do not queue while the queue was served")
	// With no one queued, the last release deleted the key: they take it.
	assert.Eventually(t, func() bool { return overtakes() > 0 }, 10*time.Second, time.Millisecond, "the clients that do not queue take %s once the queue is empty", key)
	for _, lp := range loops {
		lp.end()
	}
	assert.Zero(t, w.overlaps.Load(), "two holders of %s at once", key)
}

// This library's plain Acquire in a loop, on one goroutine, does not starve
// a queued fair waiter: each plain Release announces the key it frees, and
// the waiter, woken, tries at once. It may lose that race (the plain
// Acquire's next attempt may reach the nodes first: a few overtakes), so
// the bound asserted is the waiter's wait while the loop goes on, not a
// count; the two never hold the key at once.
func TestFairQueueBesidePlainAcquires(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	key := "plain"
	var w witness
	plain, _ := ownRedlock(t, f, viaF)
	lp := startLoop(t, plainTaker(t, plain, key), &w)
	require.Eventually(t, func() bool { return lp.grants.Load() > 0 }, 10*time.Second, time.Millisecond, "the plain client took %s", key)
	fair, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	began, before := time.Now(), lp.grants.Load()
	// Its retry delay is an hour: between announcements it tries every
	// third of its liveness (333ms).
	got := waitFair(t, f, fair, key, &w, nil, redlock.WithRetryDelay(time.Hour))
	select {
	case g := <-got:
		require.NoError(t, g.err, "the fair waiter's Acquire")
		t.Logf("the waiter got the lock after %v and %d plain grants while it waited", g.at.Sub(began), lp.grants.Load()-before)
	case <-time.After(5 * time.Second):
		t.Fatalf("a fair waiter beside a plain Acquire loop waited 5s (%d plain grants)", lp.grants.Load()-before)
	}
	lp.end()
	assert.Zero(t, w.overlaps.Load(), "two holders of %s at once", key)
}
