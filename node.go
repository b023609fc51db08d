package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a call to one node lives and ends.
//
// A node is one member of the quorum. It sends its calls through lanes, one
// per connection pool that really is one server: a redis.Client (or a
// FailoverClient) has one lane; a ClusterClient has one per shard primary,
// so that a hung shard holds up only the calls to its own slots. A lane has
// a queue, at most one worker goroutine sending it, and a circuit breaker.
//
//  1. Launch. An attempt submits one call per node to the lane of its
//     resources. An open lane refuses it at once: a vote against
//     (*NodeTimeoutError with CircuitOpen), nothing sent. Otherwise the call
//     queues, and a worker is started if none runs. A queued call is a few
//     words of memory, not a goroutine.
//  2. Send. The worker takes the whole queue (a single call, alone, when
//     half-open) and drops the calls that are no longer worth sending:
//     an acquire or extend whose attempt failed or was decided, whose
//     caller's ctx ended, or whose attempt's deadline passed. Nothing was
//     written for those, so nothing needs cleaning. Releases are always
//     sent. The rest go out in one pipeline with a deadline of one node
//     timeout from now, which no caller's ctx can cut short. A node that
//     lacks a script answers NOSCRIPT to its calls, which did not run;
//     they go again with the script, in the batch's order, together with
//     the later calls that ran on their keys too early (see resends).
//  3. Vote. Each call's answer is its node's vote, unless the attempt's
//     collector already counted that node (its deadline passed or its ctx
//     ended): each node votes exactly once per attempt, and the vote channel
//     has room for every node, so no sender ever blocks.
//  4. Late answer. An answer that comes after its vote was counted still
//     records what cleanup needs: whether the node wrote the value, and, for
//     a release, that the node deleted it.
//  5. Cleanup. A failed acquire attempt is released on each node that may
//     have written it, once that node's acquire has answered (from the
//     worker, when the answer comes after the attempt failed), so that the
//     release can never overtake the acquire on another connection.
//  6. Silence. A watchdog fires when a batch has no answer after its node
//     timeout. It opens the breaker, fails the queued calls (a cleanup
//     release is held instead, and sent again as soon as the node answers
//     anything: a slow node still gets its cleanups), and detaches
//     the worker, which stays parked in the client until the node answers or
//     the client gives up. Only a node's own silence opens its breaker: a
//     caller that gives up early, or a call that waited in the queue behind
//     a busy node, says nothing about the node's health.
//
// The breaker's states:
//
//	closed    calls are queued and sent in batches.
//	open      the lane was silent past a node timeout: calls fail at once,
//	          until retryAt (one node timeout later) and only while fewer than
//	          maxParked workers are parked on the lane.
//	half-open the next call is sent alone, as a probe; calls that come
//	          while it is out fail at once, as when open.
//
//	closed    -> open       a batch was silent past its node timeout
//	open      -> half-open  retryAt passed and fewer than maxParked are parked,
//	                        or a parked batch came back with an answer
//	half-open -> closed     the probe was answered (any answer, even an error reply)
//	half-open -> open       the probe was silent too
//
// So a node that does not answer holds at most maxParked goroutines of this
// package, however many calls are made meanwhile; a node that answers within
// the node timeout is never opened, however many callers gave up on it.

// maxHeld bounds the cleanup releases a lane holds while its breaker is
// open; past it the oldest are given up (and reported).
const maxHeld = 4096

// maxParked bounds the workers parked on one lane (a node, or a Cluster
// shard) that does not answer: while that many are parked, the lane sends
// nothing new, not even a probe.
const maxParked = 4

// breakerState is a lane's circuit breaker state; see above.
type breakerState uint8

const (
	closed breakerState = iota
	open
	halfOpen
)

// node is one member of the quorum.
type node struct {
	index  int
	addr   string // for people: see NodeError.Addr
	client redis.UniversalClient
	// scripts is what the lanes send through: client itself (a test may
	// put a fake in its place).
	scripts scripter
	// cluster is set for a Redis Cluster: a lane per shard, and releases
	// announced with sharded pub/sub on one channel per resource.
	cluster *redis.ClusterClient
	// one is the lane of a node that is one server; on a Cluster, the lane
	// used until the Cluster's slot map is known (see laneFor).
	one *lane
	// ackOne is one's twin for the calls of locks that wait for replicas
	// (WithReplicaAck, WithAOFAck): their batches end with a WAIT, which
	// no plain call should wait behind. A lock's calls all take the same
	// lane, so a release never overtakes its lock's acquire on a node.
	ackOne *lane

	mu     sync.Mutex
	shards map[string]*lane // Cluster: by the shard primary's address
	mapped atomic.Bool      // Cluster: a call has been answered, so the slot map is loaded

	// Which server it is (identity.go): servers is the Redlock's record;
	// identify is set for a node that asks its server's run_id, until it
	// has, then again each identityEvery (askedAt: when its server last
	// answered the question); twin is set while another node is the same
	// server: this node's calls then vote against, unsent.
	servers  *servers
	identify bool
	askedAt  atomic.Int64 // Unix nanoseconds; 0 before the first answer
	twin     atomic.Pointer[sameServerError]
}

func newNode(i int, c redis.UniversalClient, owner *flight, base time.Duration, s *servers) *node {
	nd := &node{index: i, addr: addrOf(c), client: c, scripts: c, servers: s, identify: identifies(c)}
	nd.cluster, _ = c.(*redis.ClusterClient)
	nd.one = &lane{node: nd, owner: owner, base: base}
	nd.ackOne = &lane{node: nd, owner: owner, base: base}
	return nd
}

// asking reports whether the node's next round asks its server's run_id:
// until the server has answered it, and again each identityEvery (a server
// restarted has a new run_id). Every round sent before the first answer
// asks, so that no call of this node is judged before its identity is.
func (nd *node) asking() bool {
	if !nd.identify {
		return false
	}
	at := nd.askedAt.Load()
	return at == 0 || time.Since(time.Unix(0, at)) > identityEvery
}

// addrOf names a node for people (NodeError.Addr): its address, with the
// database when not 0; a Cluster's seeds; "sentinel failover group".
// Options hold no password in these fields.
func addrOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Addr == "FailoverClient" { // go-redis's name: the master is found through the sentinels
			return "sentinel failover group"
		}
		if o.DB != 0 {
			return fmt.Sprintf("%s/%d", o.Addr, o.DB)
		}
		return o.Addr
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	return ""
}

// script returns the script and arguments that run s on this node: on a
// Cluster, a release announces on each resource's sharded channel.
func (nd *node) script(s *script, keys []string, args []any) (*script, []any) {
	if nd.cluster == nil || s != releaseScript {
		return s, args
	}
	sharded := make([]any, 0, len(args)+len(keys))
	sharded = append(sharded, args...)
	for _, k := range keys {
		sharded = append(sharded, shardedChannel(k))
	}
	return releaseShardedScript, sharded
}

// lanes returns the node's lanes.
func (nd *node) lanes() []*lane {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	ls := []*lane{nd.one, nd.ackOne}
	for _, l := range nd.shards {
		ls = append(ls, l)
	}
	return ls
}

// laneFor returns the lane that serves key. On a Cluster it is the lane of
// the shard primary that owns key's slot; before the Cluster client has
// loaded its slot map (which it does on its first command, in a worker), it
// is the node's own lane, so that looking the shard up never blocks the
// caller.
func (nd *node) laneFor(key string) *lane {
	return nd.laneOf(key, false)
}

// laneOf returns the lane that serves key for a lock that waits for
// replicas (acked) or not; see ackOne.
func (nd *node) laneOf(key string, acked bool) *lane {
	own := nd.one
	if acked {
		own = nd.ackOne
	}
	if nd.cluster == nil || !nd.mapped.Load() {
		return own
	}
	// With the slot map loaded this does not touch the network.
	c, err := nd.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		return own
	}
	addr := c.Options().Addr
	id := addr
	if acked {
		id += " acked"
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	l := nd.shards[id]
	if l == nil {
		if nd.shards == nil {
			nd.shards = map[string]*lane{}
		}
		l = &lane{node: nd, owner: nd.one.owner, base: nd.one.base, shard: addr}
		nd.shards[id] = l
	}
	return l
}

// lane is one server's queue, worker and circuit breaker; see above.
type lane struct {
	node  *node
	owner *flight // the Redlock's: counts every worker and held call, for Close
	shard string  // a Cluster shard primary's address; "" otherwise
	// base is the Redlock's node timeout: the least silence that opens the
	// breaker, so that a caller's shorter per-call timeout (which bounds
	// only its own wait) never marks the node sick for everyone.
	base time.Duration

	mu      sync.Mutex
	queue   []*call
	spare   []*call // a queue's buffer, sent and cleared, for the next queue
	working bool    // a worker is sending the queue (parked ones do not count)
	state   breakerState
	retryAt time.Time     // open: when a probe may go
	silence time.Duration // open: the node timeout that passed
	parked  int           // detached workers still inside the client
	probing bool          // half-open: the probe is admitted and not yet answered
	held    []*call       // releases refused while open, sent when the node answers
	reached bool          // some call got past dialing the node: a write of ours may be there
	cause   error         // the client's last network error here, until the node answers: what a timeout may be due to
	out     time.Time     // when the oldest round still out was sent; zero when none is
	retry   *time.Timer   // sends a held release as the probe when the lane is idle
}

// call is one script call on one lane.
type call struct {
	s       *script
	keys    []string
	args    []any
	timeout time.Duration // how long the node may stay silent (the node timeout)
	err     error         // the answer, set by the worker
	counter uint64        // a fenced acquire's answer: the highest fencing counter of its resources there
	ack     *ackPolicy    // acquire, extend, fence with WithReplicaAck: the replicas its write must reach
	acks    int           // with ack: how many replicas acknowledged the write (-1: not known)

	// An attempt's call: its vote goes to at, as node's.
	at   *attemptState
	node int
	// A release sent on its own (the cleanup of a failed attempt, or the
	// held copy of a Release's delete): its failures go to the error
	// handler of cfg, and a delete it makes is marked in deleted (that
	// Release's record of its own deletes), when set.
	cfg     *config
	deleted *atomic.Bool
	cleanup *flight // a failed attempt's cleanups: done once answered or given up
	// settled: a release sent again after a NOSCRIPT (see resends) whose
	// first run deleted every key. Its vote is for, whatever its second
	// run says: a silent second round does not vote it against.
	settled bool
}

// submit queues c on l and starts a worker if none runs, or fails c at once
// when l is open.
func (l *lane) submit(c *call) {
	if twin := l.node.twin.Load(); twin != nil && c.at != nil {
		l.finish(c, twin) // counts once: the earlier node votes for the server
		return
	}
	l.mu.Lock()
	if err := l.admit(time.Now()); err != nil {
		dropped := l.hold(c)
		l.mu.Unlock()
		for _, d := range dropped {
			l.finish(d, err)
		}
		return
	}
	l.queue = append(l.queue, c)
	if l.working {
		l.mu.Unlock()
		return
	}
	l.working = true
	l.mu.Unlock()
	l.owner.add()
	go l.work()
}

// lastCause returns the client's last network error on the lane since the
// node last answered, or nil.
func (l *lane) lastCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// sick reports whether the node looks silent: its circuit is not closed
// (silent past its timeout lately), or a round has been out for more than
// half a node timeout. (The second rule sees a hung node before its first
// timeout ends: the waiters whose attempts it failed would otherwise open
// subscriptions to it in that moment, and park there.)
func (l *lane) sick() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state != closed || !l.out.IsZero() && time.Since(l.out) > l.base/2
}

// admit returns nil when a new call may queue, or the reason it may not.
// Called with mu held.
func (l *lane) admit(now time.Time) error {
	switch {
	case l.state == closed:
		return nil
	case l.probing, l.state == open && (l.parked >= maxParked || now.Before(l.retryAt)):
		return &NodeTimeoutError{Timeout: l.silence, CircuitOpen: true, Shard: l.shard, Cause: l.cause}
	}
	l.state, l.probing = halfOpen, true // this call is the probe
	return nil
}

// work sends the queue, batch after batch, until it is empty or the worker
// is detached by the watchdog.
func (l *lane) work() {
	defer l.owner.done()
	for {
		l.mu.Lock()
		var batch []*call
		batch, l.queue = l.queue, l.spare[:0]
		l.spare = nil
		if len(batch) == 0 {
			l.working = false
			l.spare = batch
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		sendable := batch[:0]
		for _, c := range batch {
			if c.sendable() {
				sendable = append(sendable, c)
			}
		}
		if len(sendable) == 0 {
			l.mu.Lock()
			l.probing = false // a probe that was not worth sending: the next call probes
			l.mu.Unlock()
			continue
		}
		if !l.send(sendable) {
			return // detached: parked until the client returned, and done
		}
		clear(batch)
		l.mu.Lock()
		l.spare = batch[:0] // the next queue reuses it
		l.mu.Unlock()
	}
}

// Batch states: the worker and the watchdog race to move a batch out of
// batchRunning.
const (
	batchRunning int32 = iota
	batchAnswered
	batchSilent
)

// send sends batch and hands out the answers. It reports false when the
// batch went silent past its node timeout and this worker was detached (it
// then returns only once the client has).
func (l *lane) send(batch []*call) bool {
	timeout := l.base
	for _, c := range batch {
		timeout = max(timeout, c.timeout)
	}
	onTime := l.round(batch, timeout, bySHA)
	// The node answered; those whose script it lacks (NOSCRIPT: a restarted
	// or flushed node, or a script not used on it yet) go again with the
	// script itself, in a round trip with a watchdog of its own (none for a
	// worker already detached, and counted as parked), together with the
	// calls that must still run after them (see resends).
	if again := resends(batch, onTime); len(again) > 0 {
		first := make([]error, len(again))
		for i, c := range again {
			first[i] = c.err
			// A release whose first run deleted every key stays a
			// success, whatever becomes of its second run: its watchdog
			// must not vote it against. (Written only on time: a silent
			// first round's watchdog may still be reading the batch.)
			if onTime {
				c.settled = c.s.op == OpRelease && c.err == nil
			}
		}
		if onTime {
			onTime = l.round(again, timeout, withSource)
		} else {
			_, _ = runBatch(context.Background(), l.via(again), again, withSource, false)
		}
		for i, c := range again {
			c.err = rerun(c, first[i], c.err)
		}
	}

	// What the node said: a reply (even an error reply) shows it alive;
	// a timeout is its silence; a network error (refused, reset, closed)
	// is neither: it costs nothing, and opens nothing.
	spoke, silent, reached := false, false, false
	var cause error // a network error: why the node may be silent
	for _, c := range batch {
		reached = reached || !undialed(c.err)
		switch {
		case c.err != nil && isTimeout(c.err):
			c.err = &NodeTimeoutError{Timeout: c.timeout, Shard: l.shard, Cause: c.err}
			silent = true
		case isReply(c.err):
			spoke = true
		case !errors.Is(c.err, redis.ErrClosed):
			cause = c.err
		}
	}
	var resend, failed []*call
	l.mu.Lock()
	l.reached = l.reached || reached
	switch {
	case spoke:
		l.cause = nil
	case cause != nil:
		l.cause = cause
	}
	switch {
	case !onTime:
		l.parked--
		if spoke && l.state == open {
			l.state = halfOpen // it answered after all: probe at once
		}
	case spoke:
		l.state, l.probing = closed, false
	case silent:
		// The client gave up before the watchdog (its own timeout, or it
		// honoured the deadline): the node was silent all the same.
		failed = l.trip(timeout)
	default:
		l.state, l.probing = closed, false
	}
	if spoke {
		resend = l.unhold()
	}
	// A release that got no reply is held (a copy, for an attempt's: its
	// vote stays as it is) and sent again: its delete may not have landed.
	// (batch is not changed: the watchdog may be reading it.) A call held
	// itself belongs to the held list from here on, and another worker may
	// send it at once: this one does not touch it again (again[i]).
	var again []bool
	for i, c := range batch {
		// A release to a node that nothing of this lane ever reached (every
		// connection to it was refused, and no round is still out on an
		// older connection) is not held: no write of ours is there to
		// delete, and a dead node costs no retry, nor Close's wait. (Not on
		// a Cluster: a lock's calls may have gone through another lane
		// before the slot map was known.)
		if (c.at == nil || c.at.op == OpRelease) && !isReply(c.err) && !errors.Is(c.err, redis.ErrClosed) && (l.reached || l.parked > 0 || l.node.cluster != nil || !undialed(c.err)) {
			for _, d := range l.hold(c) {
				if d != c {
					failed = append(failed, d)
				}
			}
			if c.at == nil {
				if again == nil {
					again = make([]bool, len(batch))
				}
				again[i] = true
			}
		}
	}
	l.arm()
	l.mu.Unlock()
	for _, c := range failed {
		l.finish(c, &NodeTimeoutError{Timeout: timeout, CircuitOpen: true, Shard: l.shard, Cause: cause})
	}
	if len(resend) > 0 {
		// The node has just answered: every held release goes out now,
		// in one batch, without waiting for the breaker's probe.
		l.requeue(resend)
	}
	if spoke && l.node.cluster != nil {
		l.node.mapped.Store(true)
	}
	twin := l.node.twin.Load()
	for i, c := range batch {
		if again != nil && again[i] {
			continue // held: finished when sent again
		}
		if twin != nil && c.at != nil && c.at.op != OpRelease {
			// Learnt in this batch: it ran on a server that an earlier
			// node votes for; its vote is against.
			c.err = twin
		}
		l.finish(c, c.err)
	}
	return onTime
}

// resends returns the calls of a batch just answered to send again with
// their scripts: each one the node lacked (NOSCRIPT), and each later one
// that ran but shares a key with one sent again before it. A pipeline runs
// in order; a call that answered NOSCRIPT did not run, so a later call on
// its keys ran too early: a lock's release before its own acquire (which
// the re-send then writes, to stay for its whole ttl), a write-back before
// its acquire, another lock's acquire before the release that frees it.
// Sent again after the re-sent ones, in the batch's order, each runs where
// its keys are as they would have been in order: a release then deletes
// what the acquire before it wrote. (The answers may differ from the
// batch's order: in [acquire A (NOSCRIPT), acquire B], B wins the key and A
// finds it held. Either answer is a consistent vote.) Every script may run
// twice: acquire, extend and write-back write what they wrote the first time
// (acquire lets its own value through), and a release's second run finds
// what its first left (see rerun).
//
// A batch that went silent past its node timeout (onTime false) was voted
// against already, and its worker is detached: the lane has sent newer calls
// since, on other connections (the held copy of a lock's release, as the
// breaker's probe), so no order can be kept with them. Its acquires,
// extends and write-backs that the node lacked are not sent again: they
// wrote nothing, and now never will. Only its releases that the node lacked
// go again, which delete only their own value and may run in any order.
func resends(batch []*call, onTime bool) []*call {
	var again []*call
	var keys map[string]struct{} // the keys of the calls sent again so far
	for _, c := range batch {
		switch {
		case c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT"):
			if !onTime && c.s.op != OpRelease {
				continue
			}
		case !onTime || keys == nil || !isReply(c.err) || !touches(c.keys, keys):
			// Before the first NOSCRIPT; or it did not run for sure
			// (no reply: the connection failed); or on other keys.
			continue
		}
		if keys == nil {
			keys = make(map[string]struct{}, len(c.keys))
		}
		for _, k := range c.keys {
			keys[k] = struct{}{}
		}
		again = append(again, c)
	}
	return again
}

// touches reports whether any of keys is in set.
func touches(keys []string, set map[string]struct{}) bool {
	for _, k := range keys {
		if _, ok := set[k]; ok {
			return true
		}
	}
	return false
}

// rerun returns the answer of c, sent again after its first run answered
// first and its second run then. The second run's answer stands, except
// for a release: the keys its first run deleted count with those of its
// second, so that a release that freed its keys too early (before an
// acquire of another lock's, say) is not judged as one that found nothing.
func rerun(c *call, first, second error) error {
	switch {
	case c.s.op != OpRelease:
		return second
	case first == nil:
		// Its first run deleted every key: its second, needed only to
		// run after the calls re-sent before it, cannot undo that, even
		// when its answer is lost.
		return nil
	case !isReply(first) || !isReply(second):
		return second
	}
	var a, b *ResourceLockedError
	switch {
	case second == nil:
		return nil
	case errors.As(first, &a) && errors.As(second, &b):
		if a.Applied+b.Applied >= int64(a.Requested) {
			return nil
		}
		return &ResourceLockedError{Op: b.Op, Applied: a.Applied + b.Applied, Requested: b.Requested}
	}
	return second
}

// round sends calls (their EVALSHAs, or withSource their scripts) in one
// round trip, watched: when no answer comes within timeout, the watchdog
// (silent) opens the breaker and detaches this worker. It reports whether the
// answer came in time.
func (l *lane) round(calls []*call, timeout time.Duration, how evalBy) bool {
	// The client gets no deadline: redlock's own timer bounds the wait (a
	// client that honours ctx deadlines would otherwise report the node's
	// silence as context.DeadlineExceeded), and a parked call is counted.
	var state atomic.Int32
	sent := time.Now()
	l.mu.Lock()
	if l.out.IsZero() {
		l.out = sent
	}
	l.mu.Unlock()
	watchdog := time.AfterFunc(timeout, func() {
		if state.CompareAndSwap(batchRunning, batchSilent) {
			l.silent(calls, timeout)
		}
	})
	ask := how == bySHA && l.node.asking()
	if id, answered := runBatch(context.Background(), l.via(calls), calls, how, ask); answered {
		l.node.servers.identified(l.node, id)
	}
	onTime := state.CompareAndSwap(batchRunning, batchAnswered)
	watchdog.Stop()
	l.mu.Lock()
	if l.out.Equal(sent) {
		l.out = time.Time{}
	}
	l.mu.Unlock()
	return onTime
}

// silent is the watchdog: batch has no answer after timeout. It opens the
// breaker, fails what queued behind the batch, detaches the worker and
// counts the batch's calls as timed out.
func (l *lane) silent(batch []*call, timeout time.Duration) {
	l.mu.Lock()
	l.parked++
	l.working = false
	queued := l.trip(timeout)
	cause := l.cause
	l.mu.Unlock()
	for _, c := range batch {
		if c.at != nil && !c.settled {
			c.at.vote(c.node, &NodeTimeoutError{Timeout: c.timeout, Shard: l.shard, Cause: cause})
		}
	}
	for _, c := range queued {
		l.finish(c, &NodeTimeoutError{Timeout: timeout, CircuitOpen: true, Shard: l.shard, Cause: cause})
	}
}

// trip opens the breaker after a silence of timeout, holds the queued
// cleanup releases, and returns the other queued calls (and any cleanup
// dropped past maxHeld), which the caller must fail. Called with mu held.
func (l *lane) trip(timeout time.Duration) []*call {
	l.state, l.retryAt, l.silence, l.probing = open, time.Now().Add(timeout), timeout, false
	var failed []*call
	for _, c := range l.queue {
		failed = append(failed, l.hold(c)...)
	}
	l.queue = nil
	l.arm()
	return failed
}

// hold keeps a release refused by an open breaker (or cut off by its
// silence), to be sent when the node answers again (see arm), and returns
// the calls to fail now: an attempt's call (its vote is against; a release's
// delete is held all the same, as a call of its own), and the oldest held
// call past maxHeld. Held calls count as in flight for Close. Called with mu
// held.
func (l *lane) hold(c *call) []*call {
	fail := []*call{}
	switch {
	case c.at == nil:
		l.held = append(l.held, c)
	case c.at.op == OpRelease:
		fail = append(fail, c)
		cp := &call{s: c.s, keys: c.keys, args: c.args, timeout: c.timeout, cfg: c.at.cfg}
		if c.at.deleted != nil {
			cp.deleted = &c.at.deleted[c.node]
		}
		l.held = append(l.held, cp)
	default:
		return []*call{c}
	}
	l.owner.add()
	if len(l.held) > maxHeld {
		fail = append(fail, l.held[0])
		l.held = l.held[1:]
		l.owner.done()
	}
	l.arm()
	return fail
}

// arm makes sure a held release is sent again, even if no other call comes:
// an idle lane (a quiet Cluster shard) must not keep a write for its whole
// ttl. The oldest held release is sent one node timeout from now (as the
// probe, when the breaker is open), while fewer than maxParked workers are
// parked and the Redlock is not closed. Called with mu held.
func (l *lane) arm() {
	if l.retry != nil || len(l.held) == 0 || l.parked >= maxParked || l.owner.stopped.Load() {
		return
	}
	l.retry = time.AfterFunc(max(time.Until(l.retryAt), l.base), l.retryHeld)
}

// retryHeld sends the oldest held release.
func (l *lane) retryHeld() {
	l.mu.Lock()
	l.retry = nil
	if len(l.held) == 0 || l.parked >= maxParked || l.owner.stopped.Load() {
		l.mu.Unlock()
		return
	}
	c := l.held[0]
	l.held = l.held[1:]
	l.mu.Unlock()
	l.submit(c)
	l.owner.done()
}

// flush sends every held release now, past the breaker (for Close).
func (l *lane) flush() {
	l.mu.Lock()
	held := l.unhold()
	l.mu.Unlock()
	if len(held) > 0 {
		l.requeue(held)
	}
}

// requeue queues held calls past the breaker and starts a worker if none
// runs; they stop counting as held.
func (l *lane) requeue(calls []*call) {
	l.mu.Lock()
	l.queue = append(l.queue, calls...)
	start := !l.working
	l.working = true
	l.mu.Unlock()
	if start {
		l.owner.add()
		go l.work()
	}
	for range calls {
		l.owner.done() // counted while held
	}
}

// unhold returns every held call, to send again now that the node answers.
// Called with mu held.
func (l *lane) unhold() []*call {
	held := l.held
	l.held = nil
	return held
}

// finish hands c's answer (or the reason it was not sent) to its attempt,
// or reports a standalone release's failure.
func (l *lane) finish(c *call, err error) {
	if c.at != nil {
		c.at.answer(c.node, err)
		return
	}
	if c.cleanup != nil {
		defer c.cleanup.done()
	}
	var rle *ResourceLockedError
	switch {
	case err == nil && c.deleted != nil:
		c.deleted.Store(true)
	case err != nil && !errors.As(err, &rle): // "not there" is what a partial attempt leaves
		report(c.cfg, &NodeError{Node: l.node.index, Addr: l.node.addr, Op: OpRelease, Err: err})
	}
}

// sendable reports whether c is still worth sending, and records that it is
// being sent; a call that is not is counted as not sent.
func (c *call) sendable() bool {
	if c.at == nil {
		return true
	}
	return c.at.sending(c.node)
}

// isReply reports whether err is nil or the node's own answer: an error
// reply, or a result judged against; not a network error or a timeout.
func isReply(err error) bool {
	switch err.(type) {
	case nil, *ResourceLockedError, *unexpectedResult:
		return true
	}
	var re redis.Error
	return errors.As(err, &re) && !isTimeout(err)
}

// undialed reports whether err says that the call never reached the node:
// its connection could not be made (refused, unresolvable: a dial error).
func undialed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial" && !oe.Timeout()
}

// isTimeout reports whether err says that the node did not answer in time:
// the batch's deadline (redlock's node timeout, noticed by the client), or
// the client's own read or write timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// evalBy is how a round sends its scripts.
type evalBy uint8

const (
	bySHA      evalBy = iota // EVALSHA: the script's hash only
	withSource               // EVAL: the script itself, which the node then caches
)

// scripter is the part of a client that sends scripts, alone or pipelined:
// all a lane calls.
type scripter interface {
	evaler
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// evaler runs one script: a client, or a pipeline it queues on.
type evaler interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
}

// via returns what calls are sent through: the node's client, or, for calls
// that wait for replicas on a Cluster, the shard primary's own client (WAIT
// must follow the script on the same connection, and go-redis does not send
// WAIT in a Cluster pipeline).
func (l *lane) via(calls []*call) scripter {
	if l.node.cluster == nil || l.node.scripts != scripter(l.node.cluster) {
		return l.node.scripts
	}
	for _, c := range calls {
		if c.ack != nil {
			if m, err := l.node.cluster.MasterForKey(context.Background(), c.keys[0]); err == nil {
				return m
			}
			break
		}
	}
	return l.node.scripts
}

// runBatch runs calls in one round trip: alone when there is one, else in
// one pipeline; with EVALSHA, or, withSource, with EVAL (which caches the
// script on the node). A call whose script the node lacks gets the NOSCRIPT
// error, for send to run again withSource. When a call asks for replica
// acknowledgements, the pipeline ends with WAIT (or WAITAOF), which counts
// the replicas that took every write before it on the connection.
//
// With ask, the pipeline starts with INFO server, and runBatch returns the
// server's run_id (see identity.go; "" when INFO was refused, an ACL that
// forbids it), and whether the server answered the question.
func runBatch(ctx context.Context, c scripter, calls []*call, how evalBy, ask bool) (id string, answered bool) {
	eval := func(s evaler, p *call) *redis.Cmd {
		if how == withSource {
			return s.Eval(ctx, p.s.src, p.keys, p.args...)
		}
		return s.EvalSha(ctx, p.s.hash, p.keys, p.args...)
	}
	ack := strictest(calls)
	if len(calls) == 1 && ack == nil && !ask {
		p := calls[0]
		res, err := eval(c, p).Result()
		p.err = p.s.judge(res, err, p)
		return "", false
	}
	cmds := make([]*redis.Cmd, len(calls))
	var wait *redis.Cmd
	var info *redis.StringCmd
	_, perr := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if ask {
			info = pipe.Info(ctx, "server")
		}
		for i, p := range calls {
			cmds[i] = eval(pipe, p)
		}
		if ack != nil {
			wait = ack.send(ctx, pipe)
		}
		return nil
	})
	for i, p := range calls {
		res, err := cmds[i].Result()
		if res == nil && err == nil && perr != nil {
			// Never answered: the pipeline failed before it (a wrong
			// password refused as the connection was set up), and go-redis
			// gave the error to the pipeline only. A script always answers
			// something.
			err = perr
		}
		p.err = p.s.judge(res, err, p)
	}
	if ack != nil {
		judgeAcks(calls, wait)
	}
	if info != nil {
		v, err := info.Result()
		return runID(v), isReply(err)
	}
	return "", false
}
