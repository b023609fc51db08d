// Package wake wakes waiting lock calls when a resource they wait for is
// released: it holds the queues of waiters, per set of resources, and the
// pub/sub subscriptions that hear the release announcements. The nodes, their
// channels and the announcements' format are handed in; it imports nothing
// of redlock's.
package wake

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/flight"
)

// ResubscribeAfter is how long a subscription waits before trying again
// after it failed (pub/sub not allowed, the node down): meanwhile the
// waiters fall back to their retry delay.
const ResubscribeAfter = time.Second

// unknownRetry is how long a node that did not know a per-key subscription's
// command is not asked again: a Cluster upgraded in place to Redis 7 gets
// its wake-ups back within it, at the cost of one refused subscription per
// node and period while it runs 6.2.
var unknownRetry = time.Minute

// Source is one subscription to open: Open subscribes (on a node's client),
// and Sick, when set, reports that the node looks silent, so that no
// goroutine parks in a client connecting to it.
type Source struct {
	Open func(context.Context) driver.Subscription
	Sick func() bool
	// Probe, when not nil, asks the node whether it answers again, while
	// Sick says it looks silent (nil: a later call will).
	Probe func()
	Node  int // which node it hears (see Handed)
}

// Nodes says which subscriptions a Waker opens.
type Nodes interface {
	// Shared returns the subscriptions opened on the first wait, shared by
	// every waiter: one per node that announces every release on one
	// channel.
	Shared() []Source
	// PerKey returns the subscriptions opened for the first waiter of key,
	// and closed when its last waiter leaves: one per node that announces
	// each resource on a channel of its own (a Cluster).
	PerKey(key string) []Source
}

// New returns a Waker that opens nodes' subscriptions when the first waiter
// comes. An announcement's payload is a value of valueLen bytes, then the
// released resource (a longer value is announced by its first valueLen
// bytes); or handed, then the id of the waiter the resource was handed to
// (at least valueLen bytes, with no ':'), ":", the node's time in ms, ":",
// then the resource.
func New(nodes Nodes, valueLen int, handed string) *Waker {
	return &Waker{nodes: nodes, skip: valueLen, handed: handed}
}

// Waker wakes waiting Acquires when a resource they wait for is released.
//
// For each node that announces every release on one channel (a Redis
// server, or a Sentinel group) it holds one subscription, shared by every
// waiter, started on the first wait. For each node that announces each
// resource on a channel of its own (a Cluster, with sharded pub/sub) it
// holds one subscription per resource that has waiters, ended when the last
// one leaves. Close ends them all.
//
// Waiters for the same resources queue in a group, first come first
// served: an announcement wakes only the group's longest waiter. Waking them
// all would have them split the nodes between them (so that no one gets a
// quorum and all retry), and would let a waiter lose again and again; the
// other members would fail anyway, since one of them gets the lock.
type Waker struct {
	nodes   Nodes
	skip    int    // an announcement is a value of this length, then the resource
	handed  string // or this, then the id of the waiter handed the resource, then the resource
	mu      sync.Mutex
	closed  bool
	ctx     context.Context // ends with Close
	cancel  context.CancelFunc
	running flight.Flight       // the subscription goroutines
	subs    map[*sub]struct{}   // every live subscription
	keySubs map[string][]*sub   // per resource with waiters: its Cluster subscriptions
	groups  map[string]*group   // by groupID
	byKey   map[string][]*group // the groups that wait for a resource
	// unknown are the nodes that answered a per-key subscription with
	// "unknown command" (SSUBSCRIBE on a Redis 6.2 Cluster), and when: no
	// per-key subscription is opened on them for unknownRetry; their
	// waiters wait their retry delay.
	unknown map[int]time.Time
	// changed is closed, and replaced, when a shared subscription is
	// confirmed or fails (see Confirming); nil until asked for. asking
	// counts the shared subscriptions asked for and not yet settled.
	changed chan struct{}
	asking  int
	// holders are the held locks that listen for announcements of their
	// own values, by value (its first valueLen bytes); holds counts Hold
	// calls since the last sweep of holders that are over.
	holders map[string]holderSet
	holds   int // Holds since the last sweep
	left    int // holders the last sweep left
	// Keep keeps waiters' places on the nodes (see Keeper); Close stops it.
	Keep Keeper
}

// Holder is a held lock that hears the release announcements of its own
// value (see Hold).
type Holder struct {
	keys  []string
	tags  [2]string // tags[1] is "" when it has one tag
	owner Owner
}

// Owner is the held lock a Holder tells what it hears.
type Owner interface {
	// Lost is told that node announced key released from one of the
	// holder's tags.
	Lost(node int, key string)
	// Over reports whether the lock has ended (released, lost or
	// expired).
	Over() bool
}

// tagList returns h's tags.
func (h *Holder) tagList() []string {
	if h.tags[1] == "" {
		return h.tags[:1]
	}
	return h.tags[:]
}

// holderSet is the holders of one tag: nearly always one (a tag is a
// random value's), which takes no slice of its own.
type holderSet struct {
	one  *Holder   // nil when the set is empty
	more []*Holder // the others, when more than one hold the tag
}

// with returns s and h.
func (s holderSet) with(h *Holder) holderSet {
	if s.one == nil {
		s.one = h
	} else {
		s.more = append(s.more, h)
	}
	return s
}

// without returns s without the holders drop says to drop.
func (s holderSet) without(drop func(*Holder) bool) holderSet {
	var out holderSet
	if s.one != nil && !drop(s.one) {
		out.one = s.one
	}
	for _, h := range s.more {
		if !drop(h) {
			out = out.with(h)
		}
	}
	return out
}

// size returns how many holders s has.
func (s holderSet) size() int {
	if s.one == nil {
		return 0
	}
	return 1 + len(s.more)
}

// Start opens the shared subscriptions when none run, so that they
// are confirmed by the time a lock is granted (see Confirming).
func (w *Waker) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && w.groups == nil {
		w.start()
	}
}

// Confirming returns nil when no shared subscription on nodes is waiting
// for the node's confirmation; otherwise a channel closed when one is
// confirmed or fails. A lock granted by nodes hears its force release
// once it returns nil: an announcement made before a subscription's
// confirmation is not heard.
func (w *Waker) Confirming(nodes []int) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.asking == 0 { // the common case: every subscription settled
		return nil
	}
	for s := range w.subs {
		if s.shared && s.asked && slices.Contains(nodes, s.node) {
			if w.changed == nil {
				w.changed = make(chan struct{})
			}
			return w.changed
		}
	}
	return nil
}

// ask records that s was asked for. Called with mu held.
func (w *Waker) ask(s *sub) {
	if s.shared && !s.asked {
		w.asking++
	}
	s.asked = true
}

// settle records that s was confirmed (heard) or failed, and tells
// Confirming's callers. Called with mu held.
func (w *Waker) settle(s *sub, heard bool) {
	if s.shared && s.asked {
		w.asking--
	}
	s.heard, s.asked = heard, false
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// Hold registers owner, a held lock on keys whose announced values start
// with tag or, when not "", tag2 (each valueLen bytes): an announcement from
// a node naming one of keys with one of its tags calls owner's Lost,
// outside the Waker's lock, as often as it comes. With subscribe, it starts
// the shared subscriptions when none run (a Cluster's per-key ones are
// opened only for waiters: a holder hears those while they run). A Hold now
// and then forgets the holders whose owner's Over reports that the lock has
// ended (released, lost or expired), so that a lock that is never released
// costs nothing for good. It returns nil when the Waker is closed. Unhold
// removes it.
func (w *Waker) Hold(keys []string, tag, tag2 string, owner Owner, subscribe bool) *Holder {
	h := &Holder{keys: keys, tags: [2]string{tag, tag2}, owner: owner}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	if w.groups == nil && subscribe {
		w.start()
	}
	if w.holders == nil {
		w.holders = map[string]holderSet{}
	}
	if w.holds++; w.holds > 64 && w.holds > w.left {
		w.sweep() // every max(64, what the last one left) Holds: O(1) each, amortized
	}
	for _, t := range h.tagList() {
		w.holders[t] = w.holders[t].with(h)
	}
	return h
}

// sweep forgets the holders that are over. Called with mu held.
func (w *Waker) sweep() {
	w.holds, w.left = 0, 0
	for t, hs := range w.holders {
		hs = hs.without(func(h *Holder) bool { return h.owner.Over() })
		if hs.size() == 0 {
			delete(w.holders, t)
		} else {
			w.holders[t] = hs
			w.left += hs.size()
		}
	}
}

// Unhold removes h (nil: nothing).
func (w *Waker) Unhold(h *Holder) {
	if h == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range h.tagList() {
		hs := w.holders[t].without(func(o *Holder) bool { return o == h })
		if hs.size() == 0 {
			delete(w.holders, t)
		} else {
			w.holders[t] = hs
		}
	}
}

// Holding returns how many holders listen (for tests).
func (w *Waker) Holding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, hs := range w.holders {
		n += hs.size()
	}
	return n
}

// Listening returns how many of the shared subscriptions (one per node)
// the nodes have confirmed and that are open (for tests: an announcement
// made from then on is heard).
func (w *Waker) Listening() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for s := range w.subs {
		if s.shared && s.heard && s.ps != nil {
			n++
		}
	}
	return n
}

// sub is one subscription and its goroutine.
type sub struct {
	cancel context.CancelFunc
	ps     driver.Subscription // guarded by waker.mu; nil while not subscribed
	shared bool                // every resource's channel, not one key's
	node   int                 // the node it hears
	heard  bool                // guarded by waker.mu: the node confirmed ps
	asked  bool                // guarded by waker.mu: asked for, neither confirmed nor failed yet
}

// group is the queue of waiters for one set of resources.
type group struct {
	id    string
	keys  []string
	queue []*Waiter // in the order they registered
}

// Waiter is one waiting Acquire.
type Waiter struct {
	group *group
	wake  chan struct{} // holds one pending wake
	tag   any           // what a hand-over must match (see HandOver); nil: none
	id    string        // its id in the nodes' queues (a fair queue), or ""
	every time.Duration // the longest it waits between attempts when no wake comes (see Behind)
	held  bool          // guarded by Waker.mu: its last attempt found the resources held by another (see Tried)
	// missed is guarded by Waker.mu: its last attempt did not hear from a
	// node (see Tried, Recovered).
	missed bool
	offer  any // a hand-over for it, guarded by Waker.mu; nil: none
	// handedBy are the nodes that announced a resource handed to it (by
	// id), with the latest time each announced, guarded by Waker.mu.
	handedBy []Hand
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

// Join queues a waiter for keys, woken when one of them is announced as
// released while it heads its group's queue; its channel holds one wake, so
// that a storm of announcements yields at most one pending wake. It returns
// nil when the Waker is closed. With queuedOnly, it does so only when other
// waiters wait for the same resources already (an Acquire about to make its
// first attempt queues behind them); otherwise (an uncontended Acquire) it
// does nothing and returns nil. The caller must call Leave with a non-nil
// Waiter. tag, when not nil (and comparable), lets HandOver pass the waiter
// what a holder offers with an equal tag. id, when not empty, is the
// waiter's id in the nodes' queues: an announcement that a resource was
// handed to it wakes it (see New's handed). every is the longest it waits
// between attempts when no wake comes (see Behind).
func (w *Waker) Join(keys []string, queuedOnly bool, tag any, id string, every time.Duration) *Waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || queuedOnly && len(w.groups) == 0 {
		return nil // closed, or no waiter at all: an uncontended Acquire pays no more
	}
	gid := groupID(keys)
	g := w.groups[gid] // nil map before the first wait
	if queuedOnly && (g == nil || len(g.queue) == 0) {
		return nil
	}
	if w.groups == nil { // first wait: subscribe
		w.start()
	}
	if g == nil {
		g = &group{id: gid, keys: keys}
		w.groups[gid] = g
		for _, k := range keys {
			if len(w.byKey[k]) == 0 {
				w.watchKey(k)
			}
			w.byKey[k] = append(w.byKey[k], g)
		}
	}
	wt := &Waiter{group: g, wake: make(chan struct{}, 1), tag: tag, id: id, every: every}
	g.queue = append(g.queue, wt)
	return wt
}

// Leave removes wt from its group. A head that leaves without the lock
// (cancelled, out of retries) passes a wake on to the next in line: the wake
// it may have taken must not be lost to the others. It returns the offer
// handed to wt (HandOver) that wt did not Take, which the caller now owns
// and must pass on or release; nil when none. A nil wt is ignored.
func (w *Waker) Leave(wt *Waiter, acquired bool) (offer any) {
	if wt == nil {
		return nil
	}
	w.mu.Lock()
	offer, wt.offer = wt.offer, nil
	var stop []driver.Subscription
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
		switch {
		case i == 0 && !acquired:
			g.queue[0].poke()
		case i == 0:
			// The resources are held, by wt: the next head's attempts
			// stand for the waiters behind it before it made one (see
			// Behind), as its predecessor's did.
			g.queue[0].held = true
		}
		return offer
	}
	if w.groups[g.id] != g {
		return offer // dropped by Close
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
	return offer
}

// HandOver passes offer to the longest waiter for keys (in any order) whose
// tag equals tag and that has no offer yet: it leaves the queue at once
// (a release announcement will not wake it again) and is woken to Take the
// offer. It reports false when no such waiter waits, or the Waker is closed.
func (w *Waker) HandOver(keys []string, tag, offer any) bool {
	if tag == nil || offer == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.groups) == 0 {
		return false
	}
	g := w.groups[groupID(keys)]
	if g == nil {
		return false
	}
	for i, wt := range g.queue {
		if wt.offer == nil && wt.tag == tag {
			g.queue = slices.Delete(g.queue, i, i+1)
			if i == 0 && len(g.queue) > 0 {
				g.queue[0].held = true // held, by the waiter handed it: see Behind
			}
			wt.offer = offer
			wt.poke()
			return true
		}
	}
	return false
}

// Hand is a node's announcement that it handed a resource to a waiter: the
// node, and the latest time (its clock, ms) it announced one.
type Hand struct {
	Node int
	At   int64
}

// handed records node's announcement at at. Called with Waker.mu held.
func (wt *Waiter) handed(node int, at int64) {
	for i := range wt.handedBy {
		if wt.handedBy[i].Node == node {
			wt.handedBy[i].At = max(wt.handedBy[i].At, at)
			return
		}
	}
	wt.handedBy = append(wt.handedBy, Hand{node, at})
}

// Handed returns the nodes that announced a resource handed to wt by its
// id (see Join), in the order first heard; nil for a nil wt.
func (w *Waker) Handed(wt *Waiter) []Hand {
	if wt == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(wt.handedBy)
}

// Tried records whether wt's last attempt found its resources held by
// another (a holder whose release will be announced), and whether it missed
// a node (no answer: see Recovered). A nil wt is ignored.
func (w *Waker) Tried(wt *Waiter, held, missed bool) {
	if wt == nil {
		return
	}
	w.mu.Lock()
	wt.held, wt.missed = held, missed
	w.mu.Unlock()
}

// RecoveredWakes is the least pause between attempts (Join's every) of a
// head that Recovered wakes. A head that tries again sooner is left to its
// jittered delay: woken together, the heads of many calls that met a busy
// node would all try at the moment it answers again, and make it silent
// once more (benchmarks/README.md, holders).
const RecoveredWakes = time.Second

// Recovered wakes each queue's head whose last attempt missed a node
// (Tried) and that waits longer than RecoveredWakes between attempts: a
// node answers again after it did not, and the release the head was woken
// for, or heard nothing of, may be there to take. Its retry delay (an hour
// for some) is no bound to wait for a lock that a node's absence kept from
// it.
func (w *Waker) Recovered() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.groups {
		if len(g.queue) > 0 && g.queue[0].missed && g.queue[0].every > RecoveredWakes {
			g.queue[0].poke()
		}
	}
}

// Behind reports whether wt queues behind another waiter (its queue's
// head, which an announcement wakes) whose last attempt found the
// resources held by another (Tried) and that waits no longer between
// attempts, while a node's confirmed subscription hears the release
// announcements of each of its resources: then the head's attempts stand
// for wt's. It is false for a nil wt, or one out of its queue (handed an
// offer).
func (w *Waker) Behind(wt *Waiter) bool {
	if wt == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := wt.group.queue
	if slices.Index(q, wt) <= 0 || !q[0].held || q[0].every > wt.every {
		return false
	}
	for s := range w.subs {
		if s.shared && s.heard && s.ps != nil {
			return true // every resource's channel
		}
	}
	for _, k := range wt.group.keys {
		if !slices.ContainsFunc(w.keySubs[k], func(s *sub) bool { return s.heard && s.ps != nil }) {
			return false
		}
	}
	return true
}

// Idle reports whether no call waits (a cheap test before HandOver).
func (w *Waker) Idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.groups) == 0
}

// Take returns the offer handed to wt and clears it; nil when there is
// none (or wt is nil).
func (w *Waker) Take(wt *Waiter) any {
	if wt == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	offer := wt.offer
	wt.offer = nil
	return offer
}

// start opens the shared subscriptions. Called with mu held.
func (w *Waker) start() {
	w.groups = map[string]*group{}
	w.byKey = map[string][]*group{}
	w.subs = map[*sub]struct{}{}
	w.keySubs = map[string][]*sub{}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for _, s := range w.nodes.Shared() {
		w.listen(s, "")
	}
}

// watchKey opens key's own subscriptions, for the first waiter of key.
// Called with mu held, after start.
func (w *Waker) watchKey(key string) {
	for _, s := range w.nodes.PerKey(key) {
		if at, ok := w.unknown[s.Node]; !ok || time.Since(at) >= unknownRetry {
			w.keySubs[key] = append(w.keySubs[key], w.listen(s, key))
		}
	}
}

// listen starts a subscription, and its goroutine, which
// dispatches the announcements until the subscription is cancelled or the
// waker closed. A node that refuses or loses the subscription is tried
// again after ResubscribeAfter; its waiters meanwhile rely on the delay. So
// is a node (a Cluster shard) whose circuit is open: connecting to a node
// that does not answer would park this goroutine in the client, out of
// reach of Close; the source's Probe asks it meanwhile whether it answers. Every time the subscription starts again after its
// first start, it wakes the heads it serves (every group's, or key's
// groups' for a per-key one): what the node announced in the gap was not
// heard. Called with mu held.
func (w *Waker) listen(src Source, key string) *sub {
	ctx, cancel := context.WithCancel(w.ctx)
	s := &sub{cancel: cancel, shared: key == "", node: src.Node}
	w.ask(s)
	w.subs[s] = struct{}{}
	w.running.Add()
	go func() {
		defer w.running.Done()
		started := false // confirmed once: a later confirmation closes a gap
		for ctx.Err() == nil {
			if src.Sick != nil && src.Sick() {
				w.mu.Lock()
				w.settle(s, false)
				w.mu.Unlock()
				if src.Probe != nil {
					// No call may come before the waiters' retry delay
					// (an hour for some): the subscription asks itself.
					src.Probe()
				}
				pause(ctx, ResubscribeAfter)
				continue
			}
			w.mu.Lock()
			w.ask(s)
			w.mu.Unlock()
			ps := src.Open(ctx)
			w.mu.Lock()
			if ctx.Err() != nil { // cancelled or closed meanwhile
				w.settle(s, false)
				w.mu.Unlock()
				_ = ps.Close()
				return
			}
			s.ps = ps
			w.mu.Unlock()
			err := w.receive(ctx, ps, src.Node, key, &started, s)
			w.mu.Lock()
			s.ps = nil
			w.settle(s, false)
			unknown := key != "" && unknownCommand(err)
			if unknown {
				if w.unknown == nil {
					w.unknown = map[int]time.Time{}
				}
				w.unknown[src.Node] = time.Now()
			}
			w.mu.Unlock()
			_ = ps.Close()
			if unknown {
				return // the server lacks the command: asking again cannot help
			}
			pause(ctx, ResubscribeAfter)
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

// receive dispatches ps's announcements until it fails (returning the
// error), is closed, or the node ends the subscription (a Cluster does
// when the slot moves). A
// confirmation of the subscription after the first (a new one, or
// go-redis's own after it reconnected) wakes the heads of key's groups
// ("": every group); started records the first.
func (w *Waker) receive(ctx context.Context, ps driver.Subscription, node int, key string, started *bool, s *sub) error {
	for {
		// Receive reconnects by itself after a network error; Close
		// ends it. A node that does not allow pub/sub answers the
		// subscription with an error.
		ev, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		switch ev.Kind {
		case driver.Message:
			w.notify(ev.Payload, node)
		case driver.Unsubscribed: // by the node
			return nil
		case driver.Subscribed:
			if *started {
				w.pokeHeads(key)
			}
			*started = true
			w.mu.Lock()
			w.settle(s, true)
			w.mu.Unlock()
		}
	}
}

// unknownCommand reports whether err is a server's "unknown command"
// reply: the server lacks what it was asked (SSUBSCRIBE before Redis 7.0).
func unknownCommand(err error) bool {
	var re driver.Error
	return errors.As(err, &re) && strings.HasPrefix(strings.ToLower(re.Error()), "err unknown command")
}

// closeAll closes subscriptions whose contexts are cancelled: that does not
// interrupt a Receive waiting for the node, closing it does.
func closeAll(subs []driver.Subscription) {
	for _, ps := range subs {
		_ = ps.Close()
	}
}

// notify wakes, without blocking, the head of each group waiting for the
// resource an announcement from node names; or, when it was handed to a
// waiter by id, that waiter, which records the node (see Handed). (The cleanup of a failed attempt announces
// nothing, so a waiter is never woken by its own.)
func (w *Waker) notify(payload string, node int) {
	if h := len(w.handed); h > 0 && strings.HasPrefix(payload, w.handed) {
		// Handed to a waiter: only it can take the resource.
		// The id (with no ':') + ":" + the node's time in ms + ":" + the resource.
		id, rest, ok1 := strings.Cut(payload[h:], ":")
		ms, key, ok2 := strings.Cut(rest, ":")
		at, err := strconv.ParseInt(ms, 10, 64)
		if !ok1 || !ok2 || err != nil || len(id) < w.skip {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, g := range w.byKey[key] {
			for _, wt := range g.queue {
				if wt.id == id {
					wt.handed(node, at)
					wt.poke()
					return
				}
			}
		}
		return
	}
	if len(payload) <= w.skip {
		return // not one of ours
	}
	tag, key := payload[:w.skip], payload[w.skip:]
	w.mu.Lock()
	for _, g := range w.byKey[key] {
		if len(g.queue) == 0 {
			continue
		}
		// Every node announces a release, and each announcement wakes the
		// head: its attempt on the first may meet nodes that had not
		// released yet, or a contender that gives up and frees them
		// silently (TestReleaseReachingTheNodesApartWakesTheWaiterAgain).
		g.queue[0].poke()
	}
	var lost []*Holder
	hs := w.holders[tag]
	if h := hs.one; h != nil && slices.Contains(h.keys, key) {
		lost = append(lost, h)
	}
	for _, h := range hs.more {
		if slices.Contains(h.keys, key) {
			lost = append(lost, h)
		}
	}
	w.mu.Unlock()
	for _, h := range lost {
		h.owner.Lost(node, key)
	}
}

// pokeHeads wakes the head of each group waiting for key, or of every
// group when key is "".
func (w *Waker) pokeHeads(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	groups := w.byKey[key]
	if key == "" {
		groups = nil
		for _, g := range w.groups {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		if len(g.queue) > 0 {
			g.queue[0].poke()
		}
	}
}

// Queued returns how many waiters queue for keys (in any order).
func (w *Waker) Queued(keys []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.groups[groupID(keys)]; g != nil {
		return len(g.queue)
	}
	return 0
}

// poke leaves one wake pending, unless one already is.
func (wt *Waiter) poke() {
	select {
	case wt.wake <- struct{}{}:
	default:
	}
}

// Wake leaves one wake pending for wt, as an announcement would (nil:
// nothing): a caller that learned from the nodes that wt should try now.
func (wt *Waiter) Wake() {
	if wt != nil {
		wt.poke()
	}
}

// C returns the wake channel, nil for a nil waiter (never ready).
func (wt *Waiter) C() <-chan struct{} {
	if wt == nil {
		return nil
	}
	return wt.wake
}

// Close ends every subscription, wakes every waiter at once (the caller
// decides what a woken waiter does: redlock's end), and returns the Flight of the
// subscription goroutines, to wait for. Later Joins return nil. It reports
// false when the Waker was closed already.
func (w *Waker) Close() (*flight.Flight, bool) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return &w.running, false
	}
	w.closed = true
	w.Keep.Stop()
	var subs []driver.Subscription
	for s := range w.subs {
		if s.ps != nil {
			subs = append(subs, s.ps)
		}
	}
	if w.cancel != nil {
		w.cancel()
	}
	for _, g := range w.groups {
		for _, wt := range g.queue {
			wt.poke()
		}
	}
	w.groups, w.byKey, w.keySubs, w.subs, w.holders = nil, nil, nil, nil, nil
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
	w.mu.Unlock()
	// Closed aside, counted in the flight: go-redis's Close waits for a
	// reconnection under way, which a node that accepts but never answers
	// holds for ever (with no read timeout); the caller's wait is bounded.
	w.running.Add()
	go func() {
		defer w.running.Done()
		closeAll(subs)
	}()
	return &w.running, true
}
