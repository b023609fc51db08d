package redlock

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/wake"
)

// The fair queue (WithFairQueue): an Acquire that finds its resources held
// queues on every node under an id of its own, scored by when it began
// waiting on its clock, so that every node orders the waiters it has the
// same way; a release hands each resource to the head of its queue
// (script.FairRelease), and announces it by the head's id, which wakes
// that waiter wherever it is. A resource is taken, as by a plain acquire,
// only by the head of its queue, or by the waiter it was handed to: the
// attempt that takes it writes the attempt's value with the whole ttl, and
// the lock's validity counts from that attempt's start, as for any grant.
//
// A waiter's place is renewed at least every third of its liveness
// (fairLive): by its own attempts, or, for a waiter on one resource, by
// its Redlock's one call per node that renews all of its waiters for that
// resource together (the renewals, below); one that gave up leaves at once
// (leave), and one that vanished leaves when its liveness runs out, as
// does, a liveness after the release, a resource handed to it. Mutual
// exclusion is untouched: a key holds one value or one id, and a holder
// needs a quorum of keys with its own value.
//
// Only calls of the fair queue read the queues; every other client meets
// them through the key alone (fair_foreign_test.go). A resource handed to a
// waiter holds the waiter's id, which this library's plain acquire,
// node-redlock's and a SET NX all find held: they wait until the queue is
// empty. A resource freed by such a client itself (its release deletes the
// key), or that expired, is free while waiters queue, and the first acquire
// to reach a quorum takes it: the head's, or the other client's. This
// library's plain release announces the key it frees, which wakes the head
// at once: the head usually comes first (its wake comes with the first
// node's delete, the plain client's next attempt after its release's
// quorum), but that is a race. Other clients' releases announce nothing,
// and the head tries again only after its pause (a third of its liveness at
// most), so a client that takes the key again as soon as it frees it
// overtakes the head until one of the head's attempts falls in a gap
// (hundreds of grants in a second), or the head's retries end. A plain lock
// handed over in its process (WithHandOver) frees nothing: that process's
// waiters go first, up to 16 hand-overs or 100ms by default. A plain
// release that handed the key to the head, as the fair release does, would
// end the race for this library's own clients, at the cost of the queue's
// keys in every release; it is not done (issue 31). Mutual exclusion holds
// with every client: each needs a quorum of keys with its own value.

// WithFairQueue sets whether an Acquire of an exclusive lock that finds its
// resources held queues for them on the nodes, first come first served
// across processes: a release hands each resource to the queue's head. A
// Redlock keeps its waiters' places for a resource with one call per node
// every third of a second, however many wait (Redis 6.2 or later: on an
// older server each waiter keeps its own by an attempt as often), and only
// the head of the queue makes attempts.
// Other clients (plain Acquires, node-redlock, SET NX) find a handed
// resource held, and may overtake the head; mutual exclusion holds with
// all. It is refused with [WithFencing], [WithPermits], [WithShared],
// [WithHandOver] or WithWakeOnRelease(false). Default: off.
func WithFairQueue(on bool) LockOption {
	return func(c *config) { c.fair = on }
}

// queueKey and queueLiveKey return the keys of resource's queue and of its
// waiters' deadlines.
func queueKey(resource string) string     { return script.Key(script.QueuePrefix, resource) }
func queueLiveKey(resource string) string { return script.Key(script.QueueLivePrefix, resource) }

// fairKeys returns the KEYS of the fair scripts: the resources, their
// queues, their deadlines.
func fairKeys(resources []string) []string {
	keys := make([]string, 0, 3*len(resources))
	keys = append(keys, resources...)
	for _, r := range resources {
		keys = append(keys, queueKey(r))
	}
	for _, r := range resources {
		keys = append(keys, queueLiveKey(r))
	}
	return keys
}

// fairLive is how long a waiter keeps its place in the queues without
// asking again: a second, or five node timeouts when that is longer.
func fairLive(cfg *config) time.Duration { return max(time.Second, 5*cfg.nodeTimeout) }

// fairKind is the kind of the fair queue's locks; member is a held lock's
// waiter's place in the queues.
type fairKind struct{ member string }

// acquire locks resources for ttl through the fair queue, as a waiter with
// a new id that began waiting now. Its place in the queues is "id:ttl"
// (see internal/script's fair.go).
func (fairKind) acquire(resources []string, ttl time.Duration, cfg *config) *plan {
	p := acquirePlan(resources, ttl)
	id := cfg.newValue()
	fc := &fairCall{member: id + ":" + strconv.FormatInt(int64(ttl/time.Millisecond), 10), live: fairLive(cfg), timeout: cfg.nodeTimeout}
	p.s, p.keys, p.hooks = script.FairAcquire, fairKeys(resources), fc
	p.single = false // each waiter renews its place in the nodes' queues
	p.args = []any{nil, int64(ttl / time.Millisecond), fc.member, time.Now().UnixMilli(), fc.live.Milliseconds(), id}
	return p
}

func (fairKind) won(p *plan, _ outcome) kind { return fairKind{member: p.hooks.(*fairCall).member} }

func (k fairKind) extend(l *Lock, ttl time.Duration) *plan {
	return fairExtendPlan(l.resources, l.value, k.member, l.until(), ttl)
}

func (k fairKind) release(l *Lock, until time.Time) *plan {
	return fairReleasePlan(l.resources, l.value, k.member, until)
}

// handsOver: the queue decides who is next.
func (fairKind) handsOver() bool { return false }

// waiterID is the waiter id a lock handed by the queue is held by ("": none).
func (k fairKind) waiterID() string {
	if k.member == "" {
		return ""
	}
	return queueID(k.member)
}

// fairCall is a fair acquire's hooks, and its state: its place in the
// queues (member), how long it keeps it without asking again (live), and
// what the nodes told it.
type fairCall struct {
	noHooks
	member  string
	live    time.Duration
	timeout time.Duration // the call's node timeout
	// mu guards what the renewals write and read (from the lanes and the
	// renewal timer): the fields up to splits.
	mu sync.Mutex
	// queuedAt is, per node, the start of the last attempt (or renewal)
	// that the node answered "queued", and queuedNode the node's time then
	// (a call on one resource; see queued).
	queuedAt   []time.Time
	queuedNode []int64
	// renewedAt is, per node, when the last renewal (or attempt) that
	// found the waiter queued there was sent; headOn, whether a renewal
	// found it at the queue's head.
	renewedAt []time.Time
	headOn    []bool
	handedOn  []bool    // a renewal found the resource handed to it there
	renewed   bool      // a renewal found it queued on some node
	leftAt    time.Time // when it last left the queues to end a split (see unsplit)
	// wt is the call's waiter, and kept whether it is in its Redlock's
	// renewal set.
	wt   *wake.Waiter
	kept bool
	// splits counts the failed attempts in a row that some node voted
	// for, since splitSince (see unsplit).
	splits     int
	splitSince time.Time
}

// waiter: it joins the waiters at once, under its id in the queues.
func (fc *fairCall) waiter() (string, bool) { return queueID(fc.member), true }

// failed records what the nodes answered, and ends a split.
func (fc *fairCall) failed(c *run, p *plan, st ExecutionStats, as *attemptState) {
	fc.queued(c, p, st, as)
	fc.unsplit(c, p, st)
	if len(p.res) == 1 && !p.acked && c.wt != nil {
		fc.keep(c.r, p.res[0], c.wt)
	}
}

// quiet: a waiter whose place a quorum of nodes renewed lately with its
// Redlock's other waiters, that heads no node's queue and whose last
// attempt did not split the nodes, makes no attempts (see the renewals,
// below).
func (fc *fairCall) quiet(c *run, _ *plan) bool {
	if fc.splits > 0 {
		return false // its attempts end the split (unsplit)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	// Until a renewal answered (a server before 6.2 refuses them), its
	// own attempts keep its place: one every third of a liveness at least.
	window := fc.live / 3
	if fc.renewed {
		window = fc.live / 2
	}
	n := 0
	for i, at := range fc.renewedAt {
		if fc.headOn[i] {
			return false
		}
		if !at.IsZero() && time.Since(at) < window {
			n++
		}
	}
	return n >= c.r.needed()
}

// ended: its renewals end with the call.
func (fc *fairCall) ended(c *run, p *plan) {
	if len(p.res) == 1 {
		fc.unkeep(c.r, p.res[0])
	}
}

// granted: see handedByNodes.
func (fc *fairCall) granted(c *run, p *plan) bool { return fc.handedByNodes(c, p) }

// pause: at most a third of its liveness, to keep its place; a wake is
// not spread (the queue decides).
func (fc *fairCall) pause(d time.Duration) (time.Duration, bool) { return min(d, fc.live/3), false }

// gaveUp: out of the queues.
func (fc *fairCall) gaveUp(c *run, p *plan) { c.r.leave(c.ctx, c.cfg, p, fc.member) }

// queueID is the id of the waiter whose place in the queues is member.
func queueID(member string) string { return member[:strings.LastIndexByte(member, ':')] }

// fairExtendPlan extends a lock of the fair queue: its resources hold its
// value, or its waiter's id (handed to it).
func fairExtendPlan(resources []string, value, member string, until time.Time, ttl time.Duration) *plan {
	p := newExtendPlan(resources, value, until, ttl)
	p.s = script.FairExtend
	p.args = append(p.args, queueID(member))
	return p
}

// fairReleasePlan releases a lock of the fair queue, whose waiter's place
// in the queues is member: each resource goes to the head of its queue.
func fairReleasePlan(resources []string, value, member string, until time.Time) *plan {
	p := newReleasePlan(resources, value, until)
	p.s, p.keys = script.FairRelease, fairKeys(resources)
	p.args = []any{value, member, queueID(member)}
	return p
}

// leave takes a waiter (member) that gave up out of the queues, and hands
// on what was handed to it: one attempt on every node, within the node
// timeout.
func (r *Redlock) leave(ctx context.Context, cfg *config, p *plan, member string) {
	lp := fairReleasePlan(p.res, queueID(member), member, time.Time{})
	lp.acked = p.acked
	_, as := r.attempt(context.WithoutCancel(ctx), cfg, lp, lp.args, nil, cfg.nodeTimeout)
	as.unref()
}

// A waiter of the fair queue for one resource learns that it holds the lock
// from the announcements of the releases that handed it the resource, with
// no round trip of its own: once a quorum of nodes announced it. A node
// hands the resource over at a time the waiter does not know, with the
// waiter's whole ttl. Each "queued" answer carries the node's time, and each
// announcement too: a node counts only when its latest announcement is later,
// on its own clock, than its latest "queued" answer (a "queued" answer after
// a hand-over means the resource was lost again: expired, or the node
// restarted). Then the hand-over came after the node answered that
// attempt, so the waiter counts its validity from the start of the attempt,
// on each node of its quorum: it may lose the time it waited since (at most
// a third of its liveness, when it waits without being woken), never count
// time that the node does not. With less than half the ttl left so counted,
// it makes an attempt, which resets the ttl from its own start. A call on
// several resources always makes that attempt (a node may answer "queued"
// for one resource while another is already handed to it), and so does one
// that waits for replicas (WithReplicaAck): the release that hands a
// resource over is not waited for.

// queued records which nodes answered attempt st (as) with "queued", and
// when by their clocks.
func (fc *fairCall) queued(c *run, p *plan, st ExecutionStats, as *attemptState) {
	if len(p.res) != 1 || p.acked {
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.init(c.r.size())
	for _, v := range st.VotesAgainst {
		if isLocked(v.Err) && v.Op == p.op {
			// The node's answer was read before its vote was counted.
			fc.queuedOn(v.Node, st.Start, int64(as.nodes[v.Node].counter))
			// It holds the waiter's place there, renewed as a renewal
			// would: a waiter that joined is quiet from its first
			// attempt on, not from its first renewal.
			if st.Start.After(fc.renewedAt[v.Node]) {
				fc.renewedAt[v.Node] = st.Start
			}
		}
	}
}

// init makes the per-node state for n nodes. Called with mu held.
func (fc *fairCall) init(n int) {
	if fc.queuedAt == nil {
		fc.queuedAt, fc.queuedNode = make([]time.Time, n), make([]int64, n)
		fc.renewedAt, fc.headOn, fc.handedOn = make([]time.Time, n), make([]bool, n), make([]bool, n)
	}
}

// queuedOn records that node i answered "queued" at its time now to a call
// sent at start, unless it answered a later call already (an attempt's and
// a renewal's answers may come in either order). After the waiter left to
// end a split (queuedNode MaxInt64), only a call sent after it left counts.
// Called with mu held.
func (fc *fairCall) queuedOn(i int, start time.Time, now int64) {
	if fc.queuedNode[i] == math.MaxInt64 && start.After(fc.leftAt) || now >= fc.queuedNode[i] && fc.queuedNode[i] != math.MaxInt64 {
		fc.queuedAt[i], fc.queuedNode[i] = start, now
	}
}

// handedGrace is how long a waiter that heard some nodes hand it the
// resource waits for a quorum of them to say so, before it makes an attempt.
const handedGrace = 5 * time.Millisecond

// handedByNodes reports whether a quorum of nodes handed the waiting call
// its resource, with at least half its ttl left by the count above; then
// the call holds the lock, under its waiter's id.
func (fc *fairCall) handedByNodes(c *run, p *plan) bool {
	if c.wt == nil {
		return false
	}
	q := c.r.needed()
	bounds := func() []time.Time {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if fc.queuedAt == nil {
			return nil
		}
		var out []time.Time
		for _, h := range c.r.wake.Handed(c.wt) {
			if t := fc.queuedAt[h.Node]; !t.IsZero() && h.At > fc.queuedNode[h.Node] {
				out = append(out, t)
			}
		}
		return out
	}
	b := bounds()
	if len(b) == 0 {
		return false
	}
	// The other nodes' announcements are on their way.
	for grace := time.Now().Add(min(handedGrace, c.cfg.nodeTimeout/2)); len(b) < q && time.Now().Before(grace); b = bounds() {
		if !sleepOrWake(c.ctx, time.Until(grace), c.wt.C()).alive {
			return false
		}
	}
	if len(b) < q {
		return false
	}
	slices.SortFunc(b, func(x, y time.Time) int { return y.Compare(x) }) // latest first
	until := b[q-1].Add(p.ttl - c.d)
	if time.Until(until) < p.ttl/2 {
		return false
	}
	id := queueID(fc.member)
	c.o.value, c.o.handed, c.o.tries = id, &handOff{value: id, until: until, since: time.Now()}, c.tries
	return true
}

// holdsSome reports whether the last renewal of some node found the
// resource handed to the waiter there. An attempt decided by two nodes
// against it returns before the node that holds its id answers: without
// this, such attempts reset the count below, and a split between quiet
// waiters lasted until the ttl (helper-24).
func (fc *fairCall) holdsSome() bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return slices.Contains(fc.handedOn, true)
}

// unsplit ends a split of the nodes between waiters of the fair queue. A
// node missing a waiter from its queue (it was down when the waiter queued,
// or lost its data) may hand a resource to a later waiter than its peers
// do; each waiter then keeps what it was handed, and its attempts renew it,
// so that none may reach a quorum. A waiter whose attempts got votes for
// but no quorum, three times in a row and for a third of its liveness,
// leaves the queues (handing on what it holds) and queues again at its
// next attempt, with the score it had: its place comes back wherever it was
// missing. Announcements heard before it left no longer count: each node
// must answer "queued" again first.
func (fc *fairCall) unsplit(c *run, p *plan, st ExecutionStats) {
	if len(st.VotesFor) == 0 && !fc.holdsSome() {
		fc.splits, fc.splitSince = 0, time.Time{}
		return
	}
	if fc.splits++; fc.splits == 1 {
		fc.splitSince = time.Now()
	}
	if fc.splits < 3 || time.Since(fc.splitSince) < fc.live/3 {
		return
	}
	c.r.leave(c.ctx, c.cfg, p, fc.member)
	fc.mu.Lock()
	for i := range fc.queuedNode {
		fc.queuedNode[i] = math.MaxInt64
	}
	fc.leftAt = time.Now()
	fc.mu.Unlock()
	fc.splits, fc.splitSince = 0, time.Time{}
}

// A Redlock keeps the places of its waiters for one resource together
// (its Waker's Keeper): a waiter on one resource whose attempt was
// answered "queued" joins its Redlock's renewal set for the resource (and
// liveness), which sends one FairRenew call per node every third of a
// liveness for all of them (at most renewChunk waiters a call). So the
// places cost the nodes a few commands a second per process and resource,
// not per waiter. Each answer, per waiter:
//   - queued there, and the resource not handed to it: a "queued" answer
//     at the node's time (queuedOn), as its own attempt's would be;
//   - not queued (the node lost it, or it was purged): it is woken, and
//     its attempt queues it again with the score it had;
//   - the resource handed to it there: it is woken to take it (an
//     announcement may have been lost, or the nodes split);
//   - at the head of the node's queue with the resource free (the holder
//     expired), or newly at the head: it is woken, and goes back to its
//     own attempts.
//
// A waiter that a quorum of nodes renewed within half a liveness (its own
// "queued" answers count), that heads no node's queue and whose last
// attempt did not split the nodes makes no attempts of its own
// (hooks.quiet): the hand-over's announcement, or a renewal, wakes it. The
// head of the queue attempts on its pause, as every waiter did before, so
// that it still finds the gaps that other clients leave
// (fair_foreign_test.go).

// renewChunk is the most waiters one renewal call carries.
const renewChunk = 500

// renewKey names a renewal set: a Redlock's waiters for one resource
// with one liveness.
type renewKey struct {
	res  string
	live time.Duration
}

// keep joins fc, which waits as wt for res, to its Redlock's renewal set.
func (fc *fairCall) keep(r *Redlock, res string, wt *wake.Waiter) {
	fc.mu.Lock()
	fc.wt = wt
	joined := fc.kept
	fc.kept = true
	fc.mu.Unlock()
	if joined {
		return
	}
	timeout := fc.timeout
	k := renewKey{res: res, live: fc.live}
	r.wake.Keep.Add(k, fc, fc.live/3, func(members []any) { r.renew(k, timeout, members) })
}

// unkeep takes fc out of its renewal set, if it is in one.
func (fc *fairCall) unkeep(r *Redlock, res string) {
	fc.mu.Lock()
	joined := fc.kept
	fc.kept = false
	fc.mu.Unlock()
	if joined {
		r.wake.Keep.Remove(renewKey{res: res, live: fc.live}, fc)
	}
}

// renew sends the renewal of the waiters members (each a *fairCall) for
// k's resource to every node, each node's call waited for no longer than
// timeout.
func (r *Redlock) renew(k renewKey, timeout time.Duration, members []any) {
	if r.closed.Load() {
		return
	}
	calls := make([]*fairCall, len(members))
	waiters := make([]*wake.Waiter, len(members))
	for i, m := range members {
		fc := m.(*fairCall)
		fc.mu.Lock()
		calls[i], waiters[i] = fc, fc.wt
		fc.mu.Unlock()
	}
	keys := fairKeys([]string{k.res})
	sent := time.Now()
	for from := 0; from < len(calls); from += renewChunk {
		to := min(from+renewChunk, len(calls))
		args := make([]any, 0, 1+to-from)
		args = append(args, k.live.Milliseconds())
		for _, fc := range calls[from:to] {
			args = append(args, fc.member)
		}
		for i, nd := range r.nodes {
			rc := &renewCall{node: i, sent: sent, calls: calls[from:to], waiters: waiters[from:to]}
			rc.Call = lane.Call{Kind: lane.Write, Hash: script.FairRenew.Hash, Src: script.FairRenew.Src, Keys: keys, Args: args, Timeout: timeout, H: rc}
			nd.Lane(k.res, false).Submit(&rc.Call)
		}
	}
}

// renewCall is one node's renewal of some waiters: a lane.Handler.
type renewCall struct {
	lane.Call
	node    int
	sent    time.Time
	calls   []*fairCall
	waiters []*wake.Waiter
}

func (rc *renewCall) Sendable() bool     { return true }
func (rc *renewCall) Held() *lane.Call   { return nil }
func (rc *renewCall) Silent(lane.Result) {}

// Done reads the node's answer (see the renewals above).
func (rc *renewCall) Done(res lane.Result) {
	if res.Err != nil {
		return // not renewed there: the next renewal, or the waiters' own attempts
	}
	a, ok := res.Reply.([]any)
	if !ok || len(a) != 4 {
		return
	}
	now, _ := a[0].(int64)
	value, _ := a[1].(string)
	head, _ := a[2].(string)
	missing, _ := a[3].([]any)
	gone := make([]bool, len(rc.calls))
	for _, m := range missing {
		if j, ok := m.(int64); ok && j >= 1 && int(j) <= len(gone) {
			gone[j-1] = true
		}
	}
	for j, fc := range rc.calls {
		wt := rc.waiters[j]
		if gone[j] {
			fc.mu.Lock()
			if fc.renewedAt != nil {
				fc.renewedAt[rc.node], fc.headOn[rc.node], fc.handedOn[rc.node] = time.Time{}, false, false
			}
			fc.mu.Unlock()
			wt.Wake() // its attempt queues it again
			continue
		}
		id := queueID(fc.member)
		atHead := head == fc.member
		fc.mu.Lock()
		if fc.renewedAt == nil {
			fc.mu.Unlock()
			continue // not answered "queued" by any attempt yet
		}
		newly := atHead && !slices.Contains(fc.headOn, true)
		fc.renewedAt[rc.node], fc.headOn[rc.node], fc.handedOn[rc.node], fc.renewed = rc.sent, atHead, value == id, true
		if value != id {
			fc.queuedOn(rc.node, rc.sent, now)
		}
		fc.mu.Unlock()
		// Handed to it there (an announcement may have been lost, or the
		// nodes split between waiters), or at the head with the resource
		// free: it tries now.
		if value == id || atHead && (newly || value == "" || value == script.Tombstone) {
			wt.Wake()
		}
	}
}
