package redlock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/pause"
	"github.com/go-redlock/redlock/internal/script"
)

// quorum is the set of nodes that vote on every operation: an attempt sends
// one call to each, and succeeds when a majority (n/2+1) vote for.
type quorum struct {
	nodes []*lane.Node
}

// size is the number of nodes.
func (q *quorum) size() int { return len(q.nodes) }

// needed is how many votes for make a quorum: n/2+1.
func (q *quorum) needed() int { return len(q.nodes)/2 + 1 }

// decided reports whether an attempt on n nodes with these votes has a
// certain outcome, and whether that outcome is a quorum for (n/2+1 votes).
// A quorum for is out of reach once more than n-q nodes voted against.
// Deciding on either threshold is what keeps an even n from hanging on a
// split vote: node-redlock waits for a quorum of votes against, which never
// comes when n=2 splits 1:1. Once all n have voted, one of the two holds.
func decided(n, votesFor, votesAgainst int) (done, won bool) {
	q := n/2 + 1
	switch {
	case votesFor >= q:
		return true, true
	case votesAgainst > n-q:
		return true, false
	}
	return false, false
}

// vote is one node's answer in one attempt.
type vote struct {
	node   int
	err    *NodeError // nil: for
	acks   int        // with replica acks: how many replicas took the write; -1 not known
	choice string     // with plan.choices: the choice the node voted for
}

// What happened to one node's call in one attempt.
const (
	callQueued     int32 = iota // submitted, not sent yet
	callSkipped                 // never sent: the node wrote nothing
	callSent                    // sent, not answered yet
	callDone                    // answered, or failed by the client
	callConnecting              // not sent yet: its lane is setting up a connection
)

// Attempt outcomes, once the collector has decided.
const (
	undecided int32 = iota
	attemptWon
	attemptLost
)

// attemptState is shared between an attempt's collector and the lanes that
// send its calls, which may answer after the attempt was decided.
type attemptState struct {
	q        *quorum
	cfg      *config
	op       Op
	ctx      context.Context // the caller's
	keys     []string        // the resources (a kind's script may have more KEYS)
	raises   bool            // plan.raises
	acked    bool            // the lock's calls take the nodes' acked lanes
	timeout  time.Duration   // the collector's wait
	deadline time.Time       // start + timeout: an acquire or extend not sent by then is not sent
	// limit is when the collector stops waiting for a node whose lane was
	// setting up a connection (whose time does not count against the
	// node's timeout): the lock's validity for an operation that writes a
	// ttl, else the deadline (a release is bounded by the node timeout).
	limit time.Time
	valid bool // limit is the lock's validity: no wait goes past it
	// wait counts the node's silence, not this process's pauses: what it
	// adds goes on each node's deadline (see until).
	wait    pause.Wait
	votes   chan int // the nodes that voted, each once (its vote in nodes[i].v): room for every node, so a send never blocks
	nodes   []nodeCall
	outcome atomic.Int32
	// cleanup is set for an operation whose failed attempts release what
	// they wrote (acquire).
	cleanup *cleanup
	own     cleanup // what cleanup points to, when set: made with the attemptState
	// deleted marks, for a release, the nodes that deleted the value in
	// any attempt of the call (see execute).
	deleted []atomic.Bool
	// abandon is the plan's (an extend's): set once the lock's release
	// started.
	abandon *atomic.Bool
	// winner is, once an attempt with choices won, its quorum's choice.
	winner atomic.Pointer[string]
	// ext is an extension's record of the nodes that lost the lock
	// (plan.ext); nil for other operations.
	ext *extension

	// refs counts who may still read the state: the attempt's caller
	// until it lets go (run.letGo), and each call a lane holds until its
	// last word (see unref). At zero, the state goes back to states for
	// the next attempt, unless kept.
	refs atomic.Int32
	// kept says it never goes back: a cleanup of it was sent, whose
	// answer counts in its pending (see clean).
	kept atomic.Bool
}

// states holds the attempts' states between attempts: an attempt's state,
// its node calls and its votes channel are most of what an operation
// allocates. One goes back once nothing can read it any more
// (see unref); one a lane may still read (a call of a round that went
// silent, whose Silent may come with its Done, or after) never does, and
// is left to the garbage collector.
var states sync.Pool

// poisonStates, set by the tests, marks every other state that would go
// back to states as released instead, so that a call's handler that reads
// it afterwards panics: the suite then shows that nothing reads a state
// after its last reference was let go, while the others are reused.
var poisonStates atomic.Bool

// poisoned and reused count, with poisonStates set, the states marked
// released and the states put back in states (not counted otherwise: a
// shared counter on every operation's path).
var poisoned, reused atomic.Int64

// newAttemptState returns a cleared state for n nodes, holding one
// reference (the caller's).
func newAttemptState(n int) *attemptState {
	as, _ := states.Get().(*attemptState)
	if as == nil || cap(as.nodes) < n || cap(as.votes) < n {
		as = &attemptState{votes: make(chan int, n), nodes: make([]nodeCall, n)}
	}
	as.nodes = as.nodes[:n]
	as.refs.Store(1)
	return as
}

// unref lets go of one reference to as. The last one clears it and puts
// it back in states, unless it is kept.
func (as *attemptState) unref() {
	switch left := as.refs.Add(-1); {
	case left > 0:
		return
	case left < 0:
		panic("redlock: an attempt's state let go more often than it was held")
	case as.kept.Load():
		return
	}
	if poisonStates.Load() {
		if poisoned.Add(1)%2 == 1 {
			as.refs.Store(released) // every other one: the rest are reused
			return
		}
		reused.Add(1)
	}
	votes, nodes := as.votes, as.nodes[:cap(as.nodes)]
	for len(votes) > 0 {
		<-votes
	}
	clear(nodes)
	*as = attemptState{votes: votes, nodes: nodes[:0]}
	states.Put(as)
}

// released is the reference count of a state let go with poisonStates set.
const released = -1 << 20

// live panics when as was let go with poisonStates set: a handler read it
// afterwards.
func (as *attemptState) live() *attemptState {
	if as.refs.Load() <= released/2 {
		panic("redlock: an attempt's state read after it was let go")
	}
	return as
}

// extendMany runs several locks' extensions (script.Extend) in one call.
var extendMany = &lane.Many{Hash: script.ExtendMany.Hash, Src: script.ExtendMany.Src, Alone: script.AloneMark}

// attempt runs p on every node at once and collects votes until the outcome
// is certain. It returns when a quorum has voted either way, not when every
// node has: a slow or hung minority never holds it up, and no node holds it
// up for longer than timeout. When ctx ends, the nodes that have not voted
// vote against with ctx's error, and it returns at once.
func (q *quorum) attempt(ctx context.Context, cfg *config, p *plan, args []any, deleted []atomic.Bool, timeout time.Duration) (ExecutionStats, *attemptState) {
	n := q.size()
	st := ExecutionStats{Start: time.Now(), MembershipSize: n, QuorumSize: q.needed(), VotesFor: make([]int, 0, n)}
	var ack *lane.Ack
	if p.op != OpRelease && cfg.ack != nil {
		ack = cfg.ack
		st.ReplicaAcks = make([]int, n)
		for i := range st.ReplicaAcks {
			st.ReplicaAcks[i] = -1
		}
	}
	as := newAttemptState(n)
	as.q, as.cfg, as.op, as.ctx, as.keys, as.raises, as.acked, as.timeout, as.deadline = q, cfg, p.op, ctx, p.res, p.raises, p.acked, timeout, st.Start.Add(timeout)
	as.deleted, as.limit, as.abandon, as.ext = deleted, as.deadline, p.abandon, p.ext
	as.wait = pause.Begin(st.Start, timeout)
	defer as.wait.End()
	if p.ttl > 0 {
		as.limit, as.valid = st.Start.Add(p.ttl-drift(cfg.driftFactor, p.ttl)), true
	}
	if p.undoFailed {
		as.own = cleanup{value: args[0], s: script.Cleanup, keys: p.res}
		as.cleanup = &as.own
		if p.undo != nil {
			as.cleanup.s, as.cleanup.keys, as.cleanup.args = p.undo, p.undoKeys, p.undoArgs
		}
	}
	var groups map[string][]int // with choices: the nodes that voted for each choice
	if p.choices {
		groups = map[string][]int{}
	}
	kind := lane.Write
	if p.op == OpRelease {
		kind = lane.Release
	}
	var last evalSHA // the nodes that run one script on the same arguments share its command
	for i, nd := range q.nodes {
		nc := &as.nodes[i]
		if deleted != nil && deleted[i].Load() {
			nc.state.Store(callDone)
			as.vote(i, nil)
			continue
		}
		s, sargs := scriptFor(nd, p.s, p.res, args)
		nc.as, nc.i, nc.s, nc.acks = as, i, s, -1
		nc.Call = lane.Call{Kind: kind, Hash: s.Hash, Src: s.Src, Keys: p.keys, Args: sargs, Cmd: last.of(s, p.keys, sargs), Timeout: cfg.nodeTimeout, Ack: ack, H: nc}
		if s == script.Extend && ack == nil {
			nc.Many = extendMany // due together on a node, extensions go in one script call
		}
		as.refs.Add(1) // the lane's, until the call's last word (see unref)
		nd.Lane(p.res[0], p.acked).Submit(&nc.Call)
	}

	// Every node votes once: by its answer, or here at the deadline or
	// when ctx ends. So this loop ends by the deadline at the latest.
	timer := startTimer(timeout)
	defer stopTimer(timer)
	done := ctx.Done()
	for {
		f, a := len(st.VotesFor), len(st.VotesAgainst)
		if groups != nil {
			// Only one choice can win: the others' nodes count
			// against it.
			top := 0
			for _, g := range groups {
				top = max(top, len(g))
			}
			f, a = top, a+len(st.VotesFor)-top
		}
		if ok, w := decided(n, f, a); ok {
			if groups != nil {
				as.choose(&st, groups, w)
			}
			if w {
				as.outcome.Store(attemptWon)
			} else {
				as.outcome.Store(attemptLost)
			}
			return st, as
		}
		select {
		case i := <-as.votes:
			v := as.nodes[i].vote(i)
			st.add(v)
			if groups != nil && v.err == nil {
				groups[v.choice] = append(groups[v.choice], v.node)
			}
		case <-timer.C:
			if next := as.expire(p); next > 0 {
				timer.Reset(next)
			}
		case <-done:
			done = nil
			for i := range n {
				as.vote(i, ctx.Err())
			}
		}
	}
}

// unsent is the vote of a node whose call was not sent because the
// attempt had failed: its answer is not known (see rest).
var unsent = &NodeError{Err: errors.New("not sent: the attempt had failed")}

// rest returns the votes of the nodes that had not voted when the attempt
// was decided (counted were), as they come until every node has voted
// (all), until passes, or the caller's ctx ends; or until a node's call is
// not sent, as the attempt had failed (not all).
func (as *attemptState) rest(counted int, until time.Time) (late []vote, all bool) {
	var t *time.Timer
	for counted+len(late) < len(as.nodes) {
		select {
		case i := <-as.votes:
			if late = append(late, as.nodes[i].vote(i)); late[len(late)-1].err == unsent {
				return late, false
			}
			continue
		default:
		}
		left := time.Until(until)
		if left <= 0 {
			return late, false
		}
		if t == nil {
			t = time.NewTimer(left)
			defer t.Stop()
		}
		select {
		case i := <-as.votes:
			if late = append(late, as.nodes[i].vote(i)); late[len(late)-1].err == unsent {
				return late, false
			}
		case <-t.C:
			return late, false
		case <-as.ctx.Done():
			return late, false
		}
	}
	return late, true
}

// evalSHA is the last EVALSHA command an attempt made for its calls (see
// lane.Call's Cmd).
type evalSHA struct {
	s    *script.Script
	args []any
	cmd  []any
}

// of returns the EVALSHA of s on keys and args: the last one when it was
// made of the same script and the same args (one slice), else a new one.
// (A node of a Cluster may run another script, or with arguments of its
// own: see scriptFor.)
func (e *evalSHA) of(s *script.Script, keys []string, args []any) []any {
	if e.cmd != nil && e.s == s && len(e.args) == len(args) && (len(args) == 0 || &e.args[0] == &args[0]) {
		return e.cmd
	}
	cmd := make([]any, 3+len(keys)+len(args))
	cmd[0], cmd[1], cmd[2] = "evalsha", s.HashArg(), len(keys)
	for i, k := range keys {
		cmd[3+i] = k
	}
	copy(cmd[3+len(keys):], args)
	e.s, e.args, e.cmd = s, args, cmd
	return cmd
}

// timers holds the attempts' timers between attempts (see startTimer): an
// attempt takes one, and puts it back stopped when it returns, after which
// it no longer reads it.
var timers sync.Pool

// startTimer returns a timer that fires after d: an idle one of timers, or
// a new one.
func startTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// stopTimer stops t and leaves it to timers. Its channel then holds no
// tick (Stop discards one since Go 1.23; the drain is for a program run
// with asynctimerchan=1, where a tick may still come late: the collector
// reads a tick as "look at the nodes' times", which a stray one only
// makes it do once more).
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}

// vote counts node i's vote, unless it was counted already: the first of
// the node's answer and the collector's giving up on it wins, so that every
// node votes once per attempt and each vote against reaches the error
// handler once.
func (as *attemptState) vote(i int, err error) {
	as.voteAcked(i, err, -1)
}

// voteAcked is vote with how many replicas took the node's write.
func (as *attemptState) voteAcked(i int, err error, acks int) {
	if !as.nodes[i].voted.CompareAndSwap(false, true) {
		return
	}
	var ne *NodeError
	if err != nil {
		ne = report(as.cfg, &NodeError{Node: i, Addr: as.q.nodes[i].Addr(), Op: as.op, Err: err})
	}
	nc := &as.nodes[i]
	nc.vErr, nc.vAcks = ne, acks // the collector reads them once it receives i
	as.votes <- i
}

// add records v in st.
func (st *ExecutionStats) add(v vote) {
	if st.ReplicaAcks != nil {
		st.ReplicaAcks[v.node] = v.acks
	}
	if v.err == nil {
		st.VotesFor = append(st.VotesFor, v.node)
	} else {
		st.VotesAgainst = append(st.VotesAgainst, v.err)
	}
}

// Where the lanes' results (internal/lane: replies, network errors,
// silences) become votes: the one place that turns them into NodeError,
// NodeTimeoutError, ResourceLockedError and ReplicaAckError. A node's call
// in an attempt is a nodeCall, the lane's Handler; a release sent on its own
// (a failed attempt's cleanup, or the held copy of a Release's delete) is a
// releaseCall.

// nodeCall is one node's part of an attempt.
type nodeCall struct {
	lane.Call
	as *attemptState
	i  int
	s  *script.Script

	counter   uint64       // the reply's Counter, when its script answers one
	choice    string       // the reply's Picks: the choice the node voted for (plan.choices)
	acks      int          // with WithReplicaAck: how many replicas took the write (-1: not known)
	state     atomic.Int32 // callQueued ... callConnecting
	since     atomic.Int64 // when its lane began setting up a connection for it (Unix ns)
	setUp     atomic.Int64 // how long its lane set up a connection before sending it (ns)
	voted     atomic.Bool  // its vote was counted: its answer, or the collector giving up on it
	clean     atomic.Bool  // acquire: the node surely holds nothing of the attempt
	releasing atomic.Bool  // acquire: the attempt's release was sent to the node
	awaited   atomic.Bool  // acquire: counted in the cleanup's pending until it answers
	// vErr and vAcks are its vote, written once by who counted it (see
	// voteAcked), read by the collector once it receives i (see vote).
	vErr  *NodeError
	vAcks int
}

// vote returns node i's vote, once counted.
func (nc *nodeCall) vote(i int) vote {
	v := vote{node: i, err: nc.vErr, acks: nc.vAcks}
	if v.err == nil {
		v.choice = nc.choice // written before its answer, by the goroutine that counted it
	}
	return v
}

// Sendable implements lane.Handler: see attemptState.sending. A call not
// sent is the lane's no more.
func (nc *nodeCall) Sendable() bool {
	as := nc.as.live()
	if as.sending(nc.i) {
		return true
	}
	if nc.Kind == lane.Write {
		as.unref()
	}
	return false
}

// Connecting implements lane.Connector: see attemptState.connecting.
func (nc *nodeCall) Connecting() { nc.as.live().connecting(nc.i) }

// Done implements lane.Handler: the node's answer is its vote. Unless the
// call's round went silent (its Silent may still come), the lane is done
// with it.
func (nc *nodeCall) Done(r lane.Result) {
	as := nc.as.live()
	if !r.Late {
		defer as.unref()
	}
	rep, err := judge(as.op, nc.s, len(as.keys), r)
	nc.counter, nc.choice = rep.Counter, rep.Picks
	if x := as.ext; x != nil {
		err = x.judge(nc.i, rep, err, as.outcome.Load() == attemptWon, nc.state.Load() == callSent)
	}
	if err == nil && nc.Ack != nil {
		nc.acks = r.Acks
		err = judgeAcks(nc.Ack, r)
	}
	as.answer(nc.i, err)
}

// Silent implements lane.Handler: the node did not answer in time, and
// votes against now; its answer, when it comes, still records what cleanup
// needs. A release sent again whose first run deleted every key stays a
// success, whatever its second run says.
func (nc *nodeCall) Silent(r lane.Result) {
	if x := nc.as.live().ext; x != nil {
		x.silent(nc.i, nc.as.outcome.Load() == attemptWon)
	}
	if nc.as.op == OpRelease && r.First != nil {
		if rep, err := judge(OpRelease, nc.s, len(nc.as.keys), *r.First); err == nil && rep.Full() {
			return
		}
	}
	nc.as.vote(nc.i, fromLane(r.Err))
}

// Held implements lane.Handler: the copy of a release that got no reply,
// sent again when the node answers; its delete counts for the Release.
func (nc *nodeCall) Held() *lane.Call {
	as := nc.as.live()
	rc := &releaseCall{s: nc.s, cfg: as.cfg, node: as.q.nodes[nc.i], resources: len(as.keys)}
	if as.deleted != nil {
		rc.deleted = &as.deleted[nc.i]
	}
	rc.Call = lane.Call{Kind: lane.Cleanup, Hash: nc.Hash, Src: nc.Src, Keys: nc.Keys, Args: nc.Args, Timeout: nc.Timeout, H: rc}
	return &rc.Call
}

// errReleaseStarted is the vote of a node whose extension was not sent
// because a release of the lock started (see plan.abandon).
var errReleaseStarted = errors.New("not sent: a release of the lock started")

// One node's call in an attempt: whether it is still sent when its lane
// gets to it (sending), how long the collector waits for it (expire: its
// timeout counts from when it is sent, not while its lane sets up a
// connection), and what its answer does (answer).

// expire votes against, with a *NodeTimeoutError, for each node whose
// time is up (until). It returns how long until the next node's time is
// up, or 0 when every node has voted.
func (as *attemptState) expire(p *plan) time.Duration {
	now := time.Now()
	var next time.Duration
	for i := range as.nodes {
		nc := &as.nodes[i]
		if nc.voted.Load() {
			continue
		}
		if left := as.until(nc, now).Sub(now); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		as.vote(i, as.timedOut(i, p))
	}
	return next
}

// until returns when node call nc's time is up, as of now: its deadline
// (start + timeout, plus the time its lane spent setting up a connection
// before sending it), or, while its lane is still setting one up, the
// limit; each plus what the process was paused meanwhile (as.wait), never
// past a validity.
func (as *attemptState) until(nc *nodeCall, now time.Time) time.Time {
	_, added := as.wait.Paused(now)
	end := as.limit
	if !as.valid {
		end = end.Add(added) // the limit is the deadline
	}
	if dl := as.deadline.Add(time.Duration(nc.setUp.Load()) + added); nc.state.Load() != callConnecting && dl.Before(end) {
		end = dl
	}
	return end
}

// timedOut is node i's vote when its time is up.
func (as *attemptState) timedOut(i int, p *plan) *NodeTimeoutError {
	l := as.q.nodes[i].Lane(p.res[0], p.acked)
	e := &NodeTimeoutError{Timeout: as.timeout, Cause: l.LastCause(), validity: as.timeout < as.cfg.nodeTimeout}
	e.Paused, _ = as.wait.Paused(time.Now())
	if rtt := l.RoundTrip(); rtt > as.timeout {
		e.RoundTrip = rtt
	}
	if nc := &as.nodes[i]; nc.state.Load() == callConnecting {
		took := time.Since(time.Unix(0, nc.since.Load())).Truncate(time.Millisecond)
		if as.limit != as.deadline {
			e.Timeout, e.setUp = as.limit.Sub(as.deadline.Add(-as.timeout)).Truncate(time.Millisecond), true
		}
		e.Cause = &lane.SetUpError{Cause: fmt.Errorf("still under way after %v", took)}
	}
	return e
}

// connecting records that node i's call waits for its lane to set up a
// connection (see internal/lane's setUp): its timeout counts from when it
// is sent, not before.
func (as *attemptState) connecting(i int) {
	nc := &as.nodes[i]
	if nc.state.CompareAndSwap(callQueued, callConnecting) {
		nc.since.Store(time.Now().UnixNano())
	}
}

// sending reports whether node i's call is still worth sending, as its lane
// is about to send it, and records the answer. A release is always sent (it
// only ever deletes our own value), and so is a plan that only raises what
// the lock's keys hold (plan.raises) unless its round failed: a node that
// takes it after the quorum catches up.
//
// An acquire or extend whose attempt was won is sent too, whatever its
// caller's ctx or the attempt's deadline: nobody waits for that vote any
// more, but the lock needs the write. A lock decided at a quorum that kept
// the nodes it had not reached yet without its write (the extension's ttl,
// or the key itself) would run on a bare quorum, and the next single fault
// would lose it (issue 31: one extension in seven missed a node). The write
// is the lock's own value, on a node where the quorum holds it: it can only
// make the lock last longer there, never give it to two holders.
//
// An acquire or extend is not sent once its attempt failed (a lost vote, or
// an acquire whose writes are being released), nor while undecided once its
// caller's ctx ended or its deadline passed (the attempt is abandoned):
// nothing is written, so nothing needs cleaning.
func (as *attemptState) sending(i int) bool {
	nc := &as.nodes[i]
	// Sent until shown otherwise, before the checks: releaseWrites sets
	// the failed flag before it reads the states, so either this sees the
	// flag and skips, or releaseWrites sees the call as sent and awaits it.
	if nc.state.Swap(callSent) == callConnecting {
		// The lane set up a connection first: that time is not the
		// node's. (The collector, which waits for a connecting node
		// until the limit, needs no wake: the lane's own watchdog
		// reports a silence one node timeout after the send.)
		nc.setUp.Store(int64(time.Since(time.Unix(0, nc.since.Load()))))
	}
	switch {
	case as.op == OpRelease:
		return true
	case as.raises && as.outcome.Load() != attemptLost:
		return true
	}
	var why error
	if as.abandon != nil && as.abandon.Load() {
		// A release of the lock started: an extension landing after its
		// deletes would write the lock back.
		as.skip(i)
		as.vote(i, errReleaseStarted)
		return false
	}
	switch out := as.outcome.Load(); {
	case as.cleanup != nil && as.cleanup.failed.Load(), out == attemptLost:
		// Nobody counts this vote any more: it is only told to rest,
		// unreported.
		if nc.voted.CompareAndSwap(false, true) {
			nc.vErr = unsent
			as.votes <- i
		}
		as.skip(i)
		return false
	case out == attemptWon:
		// The lock's write: see above. Its answer is counted by nobody
		// (the collector has returned), but a node's stray choice is
		// are still released (answer).
		return true
	case as.ctx.Err() != nil:
		why = as.ctx.Err()
	default:
		if now := time.Now(); !now.Before(as.until(nc, now)) {
			why = &NodeTimeoutError{Timeout: as.timeout, validity: as.timeout < as.cfg.nodeTimeout}
		}
	}
	if why != nil {
		as.skip(i)
		as.vote(i, why)
		return false
	}
	return true
}

// skip records that node i's call is not sent after all: it wrote nothing,
// and a cleanup that counted it as pending stops waiting for it.
func (as *attemptState) skip(i int) {
	nc := &as.nodes[i]
	nc.state.Store(callSkipped)
	if nc.awaited.Swap(false) {
		as.cleanup.pending.Done()
	}
}

// answer takes node i's answer (or, for a call never sent, the reason), and
// votes with it unless the node's vote was counted already. The state is
// recorded before the failed flag is read, and releaseWrites sets the flag
// before it reads the states, so a failed attempt's write is released
// whichever of the two comes first.
func (as *attemptState) answer(i int, err error) {
	nc := &as.nodes[i]
	if nc.state.Load() != callSent { // refused by an open lane: nothing written
		nc.state.Store(callSkipped)
		as.vote(i, err)
		return
	}
	switch err.(type) {
	case nil:
		if as.deleted != nil {
			as.deleted[i].Store(true)
		}
	case *ResourceLockedError:
		if as.cleanup != nil {
			nc.clean.Store(true) // held by another: this attempt wrote nothing there
		}
	}
	nc.state.Store(callDone)
	as.voteAcked(i, err, nc.acks)
	if err == nil && nc.choice != "" {
		as.stray(i) // a node that made another choice than the quorum
	}
	if as.cleanup != nil && as.cleanup.failed.Load() {
		as.clean(i)
		if nc.awaited.Swap(false) {
			as.cleanup.pending.Done() // its release, if any, is pending now
		}
	}
}

// choose decides an attempt with choices on its groups of votes for (the
// nodes that voted for each choice): the largest wins when it is a quorum
// (won), and the votes for of the other groups become votes against, as
// contention. A node that made another choice than the winner's releases
// its write at once (see stray); when the attempt failed, its cleanup
// releases them all.
func (as *attemptState) choose(st *ExecutionStats, groups map[string][]int, won bool) {
	best, top := "", -1
	for choice, g := range groups {
		if len(g) > top || len(g) == top && choice < best { // ties: the same choice on every call
			best, top = choice, len(g)
		}
	}
	if won {
		as.winner.Store(&best)
		st.choice = best
	}
	in := map[int]bool{}
	for _, i := range groups[best] {
		in[i] = true
	}
	keep := st.VotesFor[:0]
	var moved []int
	for _, i := range st.VotesFor {
		if in[i] {
			keep = append(keep, i)
		} else {
			moved = append(moved, i)
		}
	}
	st.VotesFor = keep
	sort.Ints(moved)
	for _, i := range moved {
		st.VotesAgainst = append(st.VotesAgainst, report(as.cfg, &NodeError{Node: i, Addr: as.q.nodes[i].Addr(), Op: OpAcquire,
			Err: &ResourceLockedError{Op: OpAcquire, Requested: len(as.keys), split: true}}))
	}
	if won {
		// Every node that has answered, its vote counted yet or not: a node
		// stores its answer before it reads the winner (stray, from
		// answer), and the winner is stored before this reads the answers,
		// so each stray node is seen by one of the two.
		for i := range as.nodes {
			as.stray(i)
		}
	}
}

// stray releases, on node i, the write of a won attempt's node whose
// choice is not the winner's: that node is no part of the lock.
func (as *attemptState) stray(i int) {
	nc := &as.nodes[i]
	w := as.winner.Load()
	if w == nil || as.cleanup == nil || nc.state.Load() != callDone || nc.choice == "" || nc.choice == *w {
		return
	}
	as.clean(i)
}

// judge turns a lane's Result for script s, run by op on that many
// resources, into a
// vote (nil: for) and the script's reply. A call sent twice (see
// internal/lane's resends) is judged on its second run, except that a
// release counts the keys both runs deleted.
func judge(op Op, s *script.Script, resources int, r lane.Result) (script.Reply, error) {
	rep, err := judgeOnce(op, s, resources, r)
	switch {
	case r.First != nil && op == OpRelease:
		_, first := judgeOnce(op, s, resources, *r.First)
		err = rerun(first, err)
	case r.First != nil && s.Restores:
		// An extension whose first run wrote the keys back: its second
		// run found them, but the node had lost them.
		if f, ferr := judgeOnce(op, s, resources, *r.First); ferr != nil && f.Restored {
			rep.Restored, err = true, ferr
		}
	}
	return rep, err
}

// judgeOnce judges one run.
func judgeOnce(op Op, s *script.Script, resources int, r lane.Result) (script.Reply, error) {
	if r.Err != nil {
		return script.Reply{}, fromLane(r.Err)
	}
	rep, err := s.Read(r.Reply, resources)
	switch {
	case err != nil:
		return rep, err
	case rep.Restored:
		return rep, &ResourceLockedError{Op: op, Requested: rep.Resources, restored: true}
	case !rep.Full():
		return rep, &ResourceLockedError{Op: op, Applied: rep.Applied, Requested: rep.Resources, full: rep.NoRoom, holder: rep.Holder}
	}
	return rep, nil
}

// rerun returns the vote of a release sent again after its first run
// answered first and its second run then: the keys its first run deleted
// count with those of its second, so that a release that freed its keys too
// early (before an acquire of another lock's, say) is not judged as one that
// found nothing; and a first run that deleted every key stands, even when
// the second's answer is lost.
func rerun(first, second error) error {
	switch {
	case first == nil:
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

// judgeAcks turns the vote for of a call whose write fell short of its
// replicas into a vote against.
func judgeAcks(a *lane.Ack, r lane.Result) error {
	switch {
	case r.AckErr != nil:
		return fromLane(r.AckErr)
	case r.Acks < a.Replicas || a.AOF && r.Local < a.Local:
		return &ReplicaAckError{Replicas: a.Replicas, Acked: r.Acks, AOF: a.AOF, Local: a.Local == 1, LocalAcked: r.Local == 1, Timeout: a.Timeout}
	}
	return nil
}

// fromLane returns the error a lane gave as a node's vote says it.
func fromLane(err error) error {
	switch e := err.(type) {
	case *lane.TimeoutError:
		nte := &NodeTimeoutError{Timeout: e.Timeout, CircuitOpen: e.CircuitOpen, Shard: e.Shard, Cause: e.Cause, RoundTrip: e.RoundTrip, Paused: e.Paused}
		if se, ok := e.Cause.(*lane.SetUpError); ok && !e.CircuitOpen {
			nte.connecting, nte.Cause = true, se.Cause // the lane gave up setting up a connection
		}
		return nte
	case *lane.TwinError:
		return &sameServerError{e}
	case *lane.UnexpectedAckError:
		return &unexpectedResult{Reply: e.Reply}
	}
	return err
}

// unexpectedResult is an answer that is not one a script or WAIT gives.
type unexpectedResult = script.UnexpectedError

// isReply reports whether err is nil or the node's own answer: an error
// reply, or a result judged against; not a network error or a timeout.
func isReply(err error) bool {
	switch err.(type) {
	case nil, *ResourceLockedError, *unexpectedResult:
		return true
	}
	var re redis.Error
	return errors.As(err, &re) && !lane.IsTimeout(err)
}

// sameServerError is the vote of a node whose server an earlier node of the
// Redlock already is (see internal/lane's identity).
type sameServerError struct{ twin *lane.TwinError }

func (e *sameServerError) Error() string {
	return "the same server as node " + strconv.Itoa(e.twin.First) + " (" + e.twin.FirstAddr + ", run_id " + e.twin.ID + "), which votes for it: " +
		"a server votes once, so that one server cannot make a majority; give New one client per independent server"
}

// Is makes it match ErrInvalidArgument: the clients given to New are wrong.
func (e *sameServerError) Is(target error) bool { return target == ErrInvalidArgument }

// scriptFor returns the script and arguments that run s on resources on nd:
// on a Cluster, a release announces on each resource's sharded channel; a
// script that Announces gets the command and the channels at the end of
// its ARGV.
func scriptFor(nd *lane.Node, s *script.Script, resources []string, args []any) (*script.Script, []any) {
	switch {
	case s.Announces:
		out := make([]any, 0, len(args)+1+len(resources))
		out = append(out, args...)
		if !nd.IsCluster() {
			out = append(out, "publish")
			for range resources {
				out = append(out, ReleasedChannel)
			}
			return s, out
		}
		out = append(out, "spublish")
		for _, r := range resources {
			out = append(out, shardedChannel(r))
		}
		return s, out
	case !nd.IsCluster() || s != script.Release:
		return s, args
	}
	sharded := make([]any, 0, len(args)+len(resources))
	sharded = append(sharded, args...)
	for _, k := range resources {
		sharded = append(sharded, shardedChannel(k))
	}
	return script.ReleaseSharded, sharded
}

// cleanup is the release of a failed acquire attempt's writes: s on keys
// with ARGV value, args...
type cleanup struct {
	s       *script.Script
	keys    []string
	args    []any
	value   any           // the attempt's value
	failed  atomic.Bool   // the attempt failed: release what it wrote
	pending flight.Flight // the releases sent, until answered
}

// releaseWrites releases a failed acquire attempt's value on every node
// that may have written it, without waiting: at once on the nodes that have
// answered, and on each other node as soon as it answers (see answer). A
// node whose call was never sent, or that said "held by another", wrote
// nothing and is left alone. It returns the cleanup, to await.
//
// A node whose acquire is still on its way counts as pending too, until it
// answers and its release (if it wrote) is sent: a caller that awaits the
// cleanup, then exits, leaves nothing behind on a node that was merely
// slower than the quorum.
func (as *attemptState) releaseWrites() *cleanup {
	cl := as.cleanup
	as.kept.Store(true) // the caller awaits cl, which as holds
	cl.failed.Store(true)
	for i := range as.nodes {
		nc := &as.nodes[i]
		as.clean(i)
		if nc.state.Load() != callSent {
			continue
		}
		cl.pending.Add()
		nc.awaited.Store(true)
		// It may have answered meanwhile, without seeing awaited.
		if nc.state.Load() != callSent && nc.awaited.Swap(false) {
			cl.pending.Done()
		}
	}
	return cl
}

// clean releases the failed attempt's value on node i once the node's
// acquire has answered, at most once.
func (as *attemptState) clean(i int) {
	nc := &as.nodes[i]
	if nc.state.Load() != callDone || nc.clean.Load() || nc.releasing.Swap(true) {
		return
	}
	cl := as.cleanup
	as.kept.Store(true) // its answer counts in cl.pending, which as holds
	cl.pending.Add()
	sendCleanup(as.cfg, as.q.nodes[i], cl.s, as.keys, cl.keys, append([]any{cl.value}, cl.args...), as.acked, &cl.pending, nil)
}

// sendCleanup sends s (a release of one value, announcing nothing) to nd
// on its own, for resources (the first routes it) with KEYS keys and ARGV
// args; pending, when set, is told once it is answered.
// doubt, when set, is set when it got no reply and is sent again
// (lane.Doubter): its first copy may still land at any time.
func sendCleanup(cfg *config, nd *lane.Node, s *script.Script, resources, keys []string, args []any, acked bool, pending *flight.Flight, doubt *atomic.Bool) {
	rc := &releaseCall{s: s, cfg: cfg, node: nd, pending: pending, resources: len(resources), doubt: doubt}
	rc.Call = lane.Call{Kind: lane.Cleanup, Hash: s.Hash, Src: s.Src, Keys: keys, Args: args, Timeout: cfg.nodeTimeout, H: rc}
	nd.Lane(resources[0], acked).Submit(&rc.Call)
}

// await waits until the releases sent so far have been answered, for at
// most d, and not past ctx.
func (cl *cleanup) await(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cl.pending.Wait():
	case <-t.C:
	case <-ctx.Done():
	}
}

// releaseCall is a release sent on its own: its failures go to the error
// handler of cfg, and a delete it makes is marked in deleted (a Release's
// record of its own deletes), when set.
type releaseCall struct {
	lane.Call
	s         *script.Script
	cfg       *config
	node      *lane.Node
	resources int // how many resources its KEYS stand for
	deleted   *atomic.Bool
	pending   *flight.Flight // a failed attempt's cleanups: done once answered or given up
	doubt     *atomic.Bool   // set when it got no reply and is sent again (see Unanswered)
}

// Unanswered implements lane.Doubter.
func (rc *releaseCall) Unanswered() {
	if rc.doubt != nil {
		rc.doubt.Store(true)
	}
}

func (rc *releaseCall) Sendable() bool     { return true }
func (rc *releaseCall) Silent(lane.Result) {}
func (rc *releaseCall) Held() *lane.Call   { return &rc.Call }

// Done implements lane.Handler.
func (rc *releaseCall) Done(r lane.Result) {
	if rc.pending != nil {
		defer rc.pending.Done()
	}
	_, err := judge(OpRelease, rc.s, rc.resources, r)
	var rle *ResourceLockedError
	switch {
	case err == nil && rc.deleted != nil:
		rc.deleted.Store(true)
	case err != nil && !errors.As(err, &rle): // "not there" is what a partial attempt leaves
		report(rc.cfg, &NodeError{Node: rc.node.Index(), Addr: rc.node.Addr(), Op: OpRelease, Err: err})
	}
}

// report passes a vote against to the error handler and returns it.
func report(cfg *config, ne *NodeError) *NodeError {
	// The handlers get copies: the engine decides on ne afterwards.
	if cfg.onError != nil {
		cp := *ne
		cfg.onError(&cp)
	}
	if cfg.observer != nil && cfg.observer.Vote != nil {
		cp := *ne
		safely(cfg.observer.Vote, &cp)
	}
	return ne
}
