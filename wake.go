package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

// ReleasedChannel is the pub/sub channel on which the release script
// announces each resource it freed (the cleanup of a failed acquire attempt
// announces nothing: that lock was never held).
// The message is the freed lock's value (32 hex characters) followed by the
// resource's name. Waiters of every Redlock, in every process, that use the
// same nodes wake on it.
//
// On a Redis Cluster (a redis.ClusterClient node) releases are announced
// with sharded pub/sub instead (SPUBLISH, Redis 7+), each on a channel in its
// resource's hash slot: ReleasedChannel + ":{" + the resource's hash tag (or
// whole name) + "}", so that an announcement stays on the resource's shard
// rather than crossing the whole cluster bus.
const ReleasedChannel = script.ReleasedChannel

// resubscribeAfter is how long a node's subscription waits before trying
// again after it failed (pub/sub not allowed, the node down): meanwhile the
// waiters fall back to the retry delay.
const resubscribeAfter = time.Second

// waker wakes waiting Acquires when a resource they wait for is released.
//
// On a Redis server (or Sentinel) node it holds one subscription to
// ReleasedChannel, shared by every waiter of its Redlock, started on the
// first wait. On a Cluster node, where releases are announced with sharded
// pub/sub on one channel per resource, it holds one subscription per
// resource that has waiters, ended when the last one leaves. Close ends them
// all.
//
// Waiters for the same resources queue in a group, first come first
// served: an announcement wakes only the group's longest waiter. Waking them
// all would have them split the nodes between them (so that no one gets a
// quorum and all retry), and would let a waiter lose again and again; the
// other members would fail anyway, since one of them gets the lock.
type waker struct {
	mu      sync.Mutex
	closed  bool
	ctx     context.Context // ends with Close
	cancel  context.CancelFunc
	running flight.Flight       // the subscription goroutines
	subs    map[*sub]struct{}   // every live subscription
	keySubs map[string][]*sub   // per resource with waiters: its Cluster subscriptions
	groups  map[string]*group   // by groupID
	byKey   map[string][]*group // the groups that wait for a resource
}

// sub is one subscription and its goroutine.
type sub struct {
	cancel context.CancelFunc
	ps     *redis.PubSub // guarded by waker.mu; nil while not subscribed
}

// group is the queue of waiters for one set of resources.
type group struct {
	id    string
	keys  []string
	queue []*waiter // in the order they registered
}

// waiter is one waiting Acquire.
type waiter struct {
	group *group
	wake  chan struct{} // holds one pending wake
}

// groupID names a set of resources whatever their order.
func groupID(keys []string) string {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	var b strings.Builder
	for _, k := range sorted {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// joinWaiters queues a waiter for keys, woken when one of them is announced
// as released by someone else while it heads its group's queue; its channel
// holds one wake, so that a storm of announcements yields at most one
// pending wake. It returns nil when the Redlock is closed. The caller must
// call unregister with a non-nil waiter.
func (r *Redlock) joinWaiters(keys []string) *waiter { return r.register(keys, false) }

// queueBehindWaiters is joinWaiters only when other waiters of this Redlock
// wait for the same resources; otherwise (an uncontended Acquire) it does
// nothing and returns nil.
func (r *Redlock) queueBehindWaiters(keys []string) *waiter { return r.register(keys, true) }

// register is joinWaiters, or with queuedOnly queueBehindWaiters.
func (r *Redlock) register(keys []string, queuedOnly bool) *waiter {
	w := &r.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || queuedOnly && len(w.groups) == 0 {
		return nil // closed, or no waiter at all: an uncontended Acquire pays no more
	}
	id := groupID(keys)
	g := w.groups[id] // nil map before the first wait
	if queuedOnly && (g == nil || len(g.queue) == 0) {
		return nil
	}
	if w.groups == nil { // first wait: subscribe
		w.start(r.nodes)
	}
	if g == nil {
		g = &group{id: id, keys: keys}
		w.groups[id] = g
		for _, k := range keys {
			if len(w.byKey[k]) == 0 {
				w.watchKey(k, r.nodes)
			}
			w.byKey[k] = append(w.byKey[k], g)
		}
	}
	wt := &waiter{group: g, wake: make(chan struct{}, 1)}
	g.queue = append(g.queue, wt)
	return wt
}

// unregister removes wt from its group. A head that leaves without the lock
// (cancelled, out of retries) passes a wake on to the next in line: the wake
// it may have taken must not be lost to the others.
func (r *Redlock) unregister(wt *waiter, acquired bool) {
	if wt == nil {
		return
	}
	w := &r.wake
	w.mu.Lock()
	var stop []*redis.PubSub
	defer func() {
		w.mu.Unlock()
		closeAll(stop)
	}()
	g := wt.group
	i := slices.Index(g.queue, wt)
	if i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
	}
	if len(g.queue) > 0 {
		if i == 0 && !acquired {
			g.queue[0].poke()
		}
		return
	}
	if w.groups[g.id] != g {
		return // dropped by Close
	}
	delete(w.groups, g.id)
	for _, k := range g.keys {
		gs := slices.DeleteFunc(w.byKey[k], func(o *group) bool { return o == g })
		if len(gs) > 0 {
			w.byKey[k] = gs
			continue
		}
		delete(w.byKey, k)
		for _, s := range w.keySubs[k] {
			s.cancel()
			delete(w.subs, s)
			if s.ps != nil {
				stop = append(stop, s.ps)
			}
		}
		delete(w.keySubs, k)
	}
}

// start subscribes to ReleasedChannel on every node that is not a Cluster.
// Called with mu held.
func (w *waker) start(nodes []*lane.Node) {
	w.groups = map[string]*group{}
	w.byKey = map[string][]*group{}
	w.subs = map[*sub]struct{}{}
	w.keySubs = map[string][]*sub{}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for _, nd := range nodes {
		if nd.Cluster() == nil {
			c := nd.Client()
			w.listen(func(ctx context.Context) *redis.PubSub { return c.Subscribe(ctx, ReleasedChannel) }, nd.Lane("", false).Sick)
		}
	}
}

// watchKey subscribes to key's sharded channel on every Cluster node, for
// the first waiter of key. Called with mu held, after start.
func (w *waker) watchKey(key string, nodes []*lane.Node) {
	ch := shardedChannel(key)
	for _, nd := range nodes {
		if cc := nd.Cluster(); cc != nil {
			s := w.listen(func(ctx context.Context) *redis.PubSub { return cc.SSubscribe(ctx, ch) }, nd.Lane(key, false).Sick)
			w.keySubs[key] = append(w.keySubs[key], s)
		}
	}
}

// listen starts a subscription made by open, and its goroutine, which
// dispatches the announcements until the subscription is cancelled or the
// waker closed. A node that refuses or loses the subscription is tried
// again after resubscribeAfter; its waiters meanwhile rely on the delay. So
// is a node (a Cluster shard) whose circuit is open: connecting to a node
// that does not answer would park this goroutine in the client, out of
// reach of Close. Called with mu held.
func (w *waker) listen(open func(context.Context) *redis.PubSub, sick func() bool) *sub {
	ctx, cancel := context.WithCancel(w.ctx)
	s := &sub{cancel: cancel}
	w.subs[s] = struct{}{}
	w.running.Add()
	go func() {
		defer w.running.Done()
		for ctx.Err() == nil {
			if sick() {
				pause(ctx, resubscribeAfter)
				continue
			}
			ps := open(ctx)
			w.mu.Lock()
			if ctx.Err() != nil { // cancelled or closed meanwhile
				w.mu.Unlock()
				_ = ps.Close()
				return
			}
			s.ps = ps
			w.mu.Unlock()
			w.receive(ctx, ps)
			w.mu.Lock()
			s.ps = nil
			w.mu.Unlock()
			_ = ps.Close()
			pause(ctx, resubscribeAfter)
		}
	}()
	return s
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// receive dispatches ps's announcements until it fails, is closed, or the
// node ends the subscription (a Cluster does when the slot moves).
func (w *waker) receive(ctx context.Context, ps *redis.PubSub) {
	for {
		// Receive reconnects by itself after a network error; Close
		// ends it. A node that does not allow pub/sub answers the
		// subscription with an error.
		msg, err := ps.Receive(ctx)
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			w.notify(m.Payload)
		case *redis.Subscription:
			if m.Count == 0 { // unsubscribed by the node
				return
			}
		}
	}
}

// closeAll closes subscriptions whose contexts are cancelled: that does not
// interrupt a Receive waiting for the node, closing it does.
func closeAll(subs []*redis.PubSub) {
	for _, ps := range subs {
		_ = ps.Close()
	}
}

// notify wakes, without blocking, the head of each group waiting for the
// resource an announcement names. (The cleanup of a failed attempt announces
// nothing, so a waiter is never woken by its own.)
func (w *waker) notify(payload string) {
	if len(payload) <= valueLen {
		return // not one of ours
	}
	key := payload[valueLen:]
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.byKey[key] {
		if len(g.queue) == 0 {
			continue
		}
		g.queue[0].poke()
	}
}

// poke leaves one wake pending, unless one already is.
func (wt *waiter) poke() {
	select {
	case wt.wake <- struct{}{}:
	default:
	}
}

// channel returns the wake channel, nil for a nil waiter (never ready).
func (wt *waiter) channel() <-chan struct{} {
	if wt == nil {
		return nil
	}
	return wt.wake
}

// closeWait is the least time Close waits for what is still in flight (two
// node timeouts when that is longer).
const closeWait = time.Second

// Close ends the Redlock's subscriptions to release announcements (one
// connection per node, opened by the first Acquire that had to wait; on a
// Cluster, one per resource being waited for), sends at once the releases
// held for nodes that had not replied, and waits for the subscription
// goroutines and for every call and release still in flight, for at least a
// second (two node timeouts when that is longer). It does not close the
// clients given to New, which stay the caller's: close the Redlock before a
// process exits, then the clients, so that nothing it sent is cut off. After
// Close, Acquire, Extend, Release and Using still work (waiting Acquires
// retry on their delay alone), but a release that gets no reply is no
// longer sent again. Close is idempotent and safe for concurrent use. It
// returns an error when something was still waiting for a node that had not
// answered by then: a call inside the client ends when the client's read
// times out or the client is closed; a release not sent is given up. Close
// itself leaves no goroutine behind.
func (r *Redlock) Close() error {
	if r == nil {
		return nil
	}
	w := &r.wake
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	var subs []*redis.PubSub
	for s := range w.subs {
		if s.ps != nil {
			subs = append(subs, s.ps)
		}
	}
	if w.cancel != nil {
		w.cancel()
	}
	// Wake the waiters at once: they retry now, then on their delay.
	for _, g := range w.groups {
		for _, wt := range g.queue {
			wt.poke()
		}
	}
	w.groups, w.byKey, w.keySubs, w.subs = nil, nil, nil, nil
	w.mu.Unlock()
	closeAll(subs)
	// Held releases go out now, past their breakers: the node may have
	// come back since their last try.
	for _, nd := range r.nodes {
		nd.Flush()
	}
	wait := max(closeWait, 2*r.cfg.nodeTimeout)
	t := time.NewTimer(wait)
	defer t.Stop()
	for _, g := range []struct {
		f    *flight.Flight
		what string
	}{{&w.running, "a subscription is still connecting to"}, {&r.workers, "a call or a release is still waiting for"}} {
		select {
		case <-g.f.Wait():
		case <-t.C:
			r.workers.Stop()
			return fmt.Errorf("redlock: close: %s a node that has not answered after %v; a call ends when the client's "+
				"read times out or the client is closed, and a release not sent by then is given up", g.what, wait)
		}
	}
	r.workers.Stop()
	return nil
}
