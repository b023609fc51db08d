package wake

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/redistest"
)

// node is a real server as a Waker hears it: announcements on channel
// "rel", as value + resource with a value of 4 bytes.
type node struct {
	c    *redis.Client
	sick atomic.Bool
	// probes counts the Source's probes; with heals set, a probe ends
	// sick (the node answered it).
	probes atomic.Int32
	heals  bool
}

func (n *node) Shared() []Source {
	return []Source{{Open: func(ctx context.Context) driver.Subscription { return driver.GoRedis(n.c).Subscribe(ctx, "rel", false) }, Sick: n.sick.Load,
		Probe: func() {
			n.probes.Add(1)
			if n.heals {
				n.sick.Store(false)
			}
		}}}
}

func (n *node) PerKey(string) []Source { return nil }

// announce publishes the release of resource by a lock of value v.
func (n *node) announce(t *testing.T, v, resource string) {
	t.Helper()
	require.NoError(t, n.c.Publish(context.Background(), "rel", v+resource).Err())
}

// woken reports whether wt is woken within d.
func woken(wt *Waiter, d time.Duration) bool {
	select {
	case <-wt.C():
		return true
	case <-time.After(d):
		return false
	}
}

// subscribed waits until the node has n subscribers to "rel".
func subscribed(t *testing.T, n *node, want int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		m, err := n.c.PubSubNumSub(context.Background(), "rel").Result()
		return err == nil && m["rel"] == want
	}, 5*time.Second, 5*time.Millisecond)
}

// Waiters for one set of resources queue first come, first served: an
// announcement wakes only the head; a head that leaves without the lock
// passes its wake on; an announcement of another resource, or one too short
// to be ours, wakes no one. Close wakes everyone and ends the subscription.
func TestQueueAndWake(t *testing.T) {
	n := &node{c: redistest.StartNode(t).Client()}
	w := New(n, 4, "~")
	assert.Nil(t, w.Join([]string{"a"}, true, nil, "", time.Second), "no waiters: an uncontended call does not queue")
	first := w.Join([]string{"a", "b"}, false, nil, "", time.Second)
	second := w.Join([]string{"b", "a"}, false, nil, "", time.Second) // the same set, in another order
	require.NotNil(t, first)
	subscribed(t, n, 1)
	third := w.Join([]string{"a", "b"}, true, nil, "", time.Second)
	assert.NotNil(t, third, "waiters: a new call queues behind them")
	assert.Equal(t, 3, w.Queued([]string{"b", "a"}))
	assert.Zero(t, w.Queued([]string{"a"}))
	w.Leave(third, false)
	assert.Equal(t, 2, w.Queued([]string{"a", "b"}))

	n.announce(t, "vvvv", "a")
	assert.True(t, woken(first, 5*time.Second), "the head is woken")
	assert.False(t, woken(second, 50*time.Millisecond), "only the head")
	n.announce(t, "vvvv", "c")
	n.announce(t, "vv", "")
	assert.False(t, woken(first, 50*time.Millisecond), "another resource, or not ours")

	n.announce(t, "vvvv", "b")
	require.Eventually(t, func() bool { return len(first.wake) == 1 }, 5*time.Second, time.Millisecond)
	w.Leave(first, false) // left without the lock: the wake goes on
	assert.True(t, woken(second, 5*time.Second), "the next in line takes the wake")

	subs, ok := w.Close()
	require.True(t, ok)
	assert.True(t, woken(second, time.Second), "Close wakes every waiter")
	select {
	case <-subs.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("a subscription goroutine is left")
	}
	subscribed(t, n, 0)
	assert.Nil(t, w.Join([]string{"a"}, false, nil, "", time.Second), "closed")
	_, ok = w.Close()
	assert.False(t, ok, "Close twice")
}

// A node that looks silent is not subscribed to until it answers again: no
// goroutine parks in a client connecting to it.
func TestSickNodeIsNotSubscribed(t *testing.T) {
	n := &node{c: redistest.StartNode(t).Client()}
	n.sick.Store(true)
	w := New(n, 4, "~")
	wt := w.Join([]string{"a"}, false, nil, "", time.Second)
	time.Sleep(100 * time.Millisecond)
	subscribed(t, n, 0)
	n.sick.Store(false)
	subscribed(t, n, 1) // within ResubscribeAfter
	n.announce(t, "vvvv", "a")
	assert.True(t, woken(wt, 5*time.Second))
	w.Leave(wt, true)
	subs, _ := w.Close()
	<-subs.Wait()
}

// A node that looks silent is probed by its subscription, which opens as
// soon as the probe says it answers: no call need come first.
func TestSickNodeIsProbed(t *testing.T) {
	n := &node{c: redistest.StartNode(t).Client(), heals: true}
	n.sick.Store(true)
	w := New(n, 4, "~")
	wt := w.Join([]string{"a"}, false, nil, "", time.Second)
	subscribed(t, n, 1)
	assert.Equal(t, int32(1), n.probes.Load())
	n.announce(t, "vvvv", "a")
	assert.True(t, woken(wt, 5*time.Second))
	w.Leave(wt, true)
	subs, _ := w.Close()
	<-subs.Wait()
}

// Per-key subscriptions (a Cluster's) open with a resource's first waiter
// and close with its last.
func TestPerKeySubscriptions(t *testing.T) {
	srv := redistest.StartNode(t).Client()
	k := &perKey{c: srv}
	w := New(k, 4, "~")
	a := w.Join([]string{"a"}, false, nil, "", time.Second)
	a2 := w.Join([]string{"a"}, false, nil, "", time.Second)
	count := func() int64 {
		m, err := srv.PubSubNumSub(context.Background(), "rel:a").Result()
		require.NoError(t, err)
		return m["rel:a"]
	}
	require.Eventually(t, func() bool { return count() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, srv.Publish(context.Background(), "rel:a", "vvvva").Err())
	assert.True(t, woken(a, 5*time.Second))
	w.Leave(a, true)
	assert.Equal(t, int64(1), count(), "a waiter is left")
	w.Leave(a2, false)
	require.Eventually(t, func() bool { return count() == 0 }, 5*time.Second, 5*time.Millisecond, "the last waiter closed it")
	subs, _ := w.Close()
	<-subs.Wait()
}

type perKey struct{ c *redis.Client }

func (p *perKey) Shared() []Source { return nil }
func (p *perKey) PerKey(key string) []Source {
	ch := "rel:" + strings.TrimSpace(key)
	return []Source{{Open: func(ctx context.Context) driver.Subscription { return driver.GoRedis(p.c).Subscribe(ctx, ch, false) }}}
}

// A server that answers a per-key subscription with "unknown command" (a
// Redis 6.2 Cluster has no SSUBSCRIBE) is not asked again, by that key's
// subscription (which would retry each ResubscribeAfter) or by another
// key's: its waiters wait their retry delay. Before, every key with waiters
// opened a connection each second that the server refused.
func TestUnknownSubscriptionIsNotAskedAgain(t *testing.T) {
	var args []string
	if redistest.Version(t).AtLeast(7, 0) {
		args = []string{"--rename-command", "SSUBSCRIBE", ""} // before 7.0 there is none to rename
	}
	srv := redistest.StartNodeWith(t, args...).Client()
	var opened atomic.Int32
	k := &sharded{c: srv, opened: &opened}
	w := New(k, 4, "~")
	a := w.Join([]string{"a"}, false, nil, "", time.Second)
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.unknown[0]
		return ok
	}, 5*time.Second, 5*time.Millisecond, "the refusal is recorded")
	b := w.Join([]string{"b"}, false, nil, "", time.Second)
	time.Sleep(2 * ResubscribeAfter) // what a retrying subscription would have used
	assert.Equal(t, int32(1), opened.Load(), "subscriptions opened: the refused one only")
	w.Leave(a, false)
	w.Leave(b, false)

	// After unknownRetry (a Cluster upgraded in place) the next key's
	// first waiter asks again.
	w.mu.Lock()
	w.unknown[0] = time.Now().Add(-unknownRetry)
	w.mu.Unlock()
	c := w.Join([]string{"c"}, false, nil, "", time.Second)
	require.Eventually(t, func() bool { return opened.Load() == 2 }, 5*time.Second, 5*time.Millisecond, "asked again")
	w.Leave(c, false)
	subs, _ := w.Close()
	<-subs.Wait()
}

type sharded struct {
	c      *redis.Client
	opened *atomic.Int32
}

func (p *sharded) Shared() []Source { return nil }
func (p *sharded) PerKey(key string) []Source {
	return []Source{{Open: func(ctx context.Context) driver.Subscription {
		p.opened.Add(1)
		return driver.GoRedis(p.c).Subscribe(ctx, "rel:"+key, true)
	}}}
}

// A subscription that starts again after its connection was cut wakes the
// heads it serves: what the node announced in the gap was not heard. Its
// first start wakes no one (a waiter's attempts are counted). (A
// waiter with a long retry delay slept through a release announced while
// its node's subscription was down: TestHandOverFencedTokenFailsWaiterQueuesAgain,
// 2 runs in 30 beside a CPU load.)
func TestResubscriptionWakesTheHeads(t *testing.T) {
	nd := redistest.StartNode(t)
	p := redistest.NewProxy(t, nd.Addr())
	n := &node{c: redis.NewClient(&redis.Options{Addr: p.Addr()})}
	t.Cleanup(func() { _ = n.c.Close() })
	direct := &node{c: nd.Client()}
	w := New(n, 4, "~")
	t.Cleanup(func() { subs, _ := w.Close(); <-subs.Wait() })
	wt := w.Join([]string{"a"}, false, nil, "", time.Second)
	other := w.Join([]string{"a"}, false, nil, "", time.Second)
	subscribed(t, direct, 1)
	assert.False(t, woken(wt, 100*time.Millisecond), "the first start wakes no one")

	p.Cut()
	subscribed(t, direct, 0)
	direct.announce(t, "vvvv", "a") // in the gap: nobody hears it
	subscribed(t, direct, 1)
	assert.True(t, woken(wt, 5*time.Second), "the head is woken when the subscription is back")
	assert.False(t, woken(other, 50*time.Millisecond), "only the head")
	w.Leave(other, false)
	w.Leave(wt, false)
}

// A node that answers again wakes the heads whose last attempt missed a
// node, and no other waiter.
func TestRecoveredWakesHeadsThatMissedANode(t *testing.T) {
	t.Parallel()
	n := &node{c: redistest.StartNode(t).Client()}
	w := New(n, 4, "~")
	t.Cleanup(func() {
		subs, _ := w.Close()
		<-subs.Wait()
	})
	missed := w.Join([]string{"a"}, false, nil, "", time.Hour)
	behind := w.Join([]string{"a"}, false, nil, "", time.Hour)
	heard := w.Join([]string{"b"}, false, nil, "", time.Hour)
	soon := w.Join([]string{"c"}, false, nil, "", RecoveredWakes)
	w.Tried(missed, true, true)
	w.Tried(behind, false, true)
	w.Tried(heard, true, false)
	w.Tried(soon, true, true)
	w.Recovered()
	assert.True(t, woken(missed, time.Second), "the head that missed a node")
	assert.False(t, woken(behind, 50*time.Millisecond), "behind the head: its attempts are the queue's")
	assert.False(t, woken(heard, 50*time.Millisecond), "its last attempt heard every node")
	assert.False(t, woken(soon, 50*time.Millisecond), "it tries again within RecoveredWakes by itself")
	w.Tried(missed, true, false)
	w.Recovered()
	assert.False(t, woken(missed, 50*time.Millisecond), "it heard every node since")
}

// The waiters behind the head stay behind a new head that has made no
// attempt yet (it queued behind the last one) when the last one left with
// the resources, by a hand-over or its own attempt: they are held, by
// it. Before, each new head in a chain of hand-overs let every waiter
// behind it try at the end of its pause, and lose.
func TestTheNextHeadStandsForTheQueue(t *testing.T) {
	t.Parallel()
	n := &node{c: redistest.StartNode(t).Client()}
	w := New(n, 4, "~")
	defer w.Close()
	keys := []string{"a"}
	var q []*Waiter
	for range 4 {
		q = append(q, w.Join(keys, false, "tag", "", time.Second))
	}
	subscribed(t, n, 1)
	require.Eventually(t, func() bool { return w.Listening() == 1 }, 5*time.Second, time.Millisecond)
	assert.False(t, w.Behind(q[3]), "the head has not tried: its attempts stand for no one yet")
	w.Tried(q[0], true, false)
	assert.True(t, w.Behind(q[3]))
	require.True(t, w.HandOver(keys, "tag", 1), "handed to the head")
	assert.True(t, w.Behind(q[3]), "the next head, untried, stands for the queue: the resource is held by the one handed it")
	w.Leave(q[0], true)
	w.Leave(q[1], true) // took it with an attempt of its own
	assert.True(t, w.Behind(q[3]), "held by the head that left with it")
	w.Leave(q[2], false)
	assert.False(t, w.Behind(q[3]), "the head now")
}
