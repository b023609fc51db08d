package redlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/lane"
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

// vote is one node's answer in one attempt.
type vote struct {
	node  int
	err   *NodeError // nil: for
	acks  int        // with replica acks: how many replicas took the write; -1 not known
	picks string     // a semaphore's acquire: the permits the node took
}

// What happened to one node's call in one attempt.
const (
	callQueued  int32 = iota // submitted, not sent yet
	callSkipped              // never sent: the node wrote nothing
	callSent                 // sent, not answered yet
	callDone                 // answered, or failed by the client
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
	keys     []string        // the resources (a fenced script's KEYS hold their counters too)
	acked    bool            // the lock's calls take the nodes' acked lanes
	timeout  time.Duration   // the collector's wait
	deadline time.Time       // start + timeout: an acquire or extend not sent by then is not sent
	votes    chan vote       // room for every node: a send never blocks
	nodes    []nodeCall
	outcome  atomic.Int32
	// cleanup is set for an operation whose failed attempts release what
	// they wrote (acquire).
	cleanup *cleanup
	// deleted marks, for a release, the nodes that deleted the value in
	// any attempt of the call (see execute).
	deleted []atomic.Bool
	// winner is, once a semaphore's attempt won, the permits its quorum
	// took.
	winner atomic.Pointer[string]
}

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
	as := &attemptState{q: q, cfg: cfg, op: p.op, ctx: ctx, keys: p.res, acked: p.acked, timeout: timeout, deadline: st.Start.Add(timeout),
		votes: make(chan vote, n), nodes: make([]nodeCall, n), deleted: deleted}
	if p.undoFailed {
		as.cleanup = &cleanup{value: args[0], s: script.Cleanup, keys: p.res}
		if p.undo != nil {
			as.cleanup.s, as.cleanup.keys, as.cleanup.args = p.undo, p.undoKeys, p.undoArgs
		}
	}
	var groups map[string][]int // a semaphore's acquire: the nodes that took each choice of permits
	if p.s.Picks {
		groups = map[string][]int{}
	}
	kind := lane.Write
	if p.op == OpRelease {
		kind = lane.Release
	}
	for i, nd := range q.nodes {
		nc := &as.nodes[i]
		if deleted != nil && deleted[i].Load() {
			nc.state.Store(callDone)
			as.vote(i, nil)
			continue
		}
		s, sargs := scriptFor(nd, p.s, p.res, args)
		nc.as, nc.i, nc.s, nc.acks = as, i, s, -1
		nc.Call = lane.Call{Kind: kind, Hash: s.Hash, Src: s.Src, Keys: p.keys, Args: sargs, Timeout: cfg.nodeTimeout, Ack: ack, H: nc}
		nd.Lane(p.res[0], p.acked).Submit(&nc.Call)
	}

	// Every node votes once: by its answer, or here at the deadline or
	// when ctx ends. So this loop ends by the deadline at the latest.
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	done := ctx.Done()
	for {
		f, a := len(st.VotesFor), len(st.VotesAgainst)
		if groups != nil {
			// Only one choice of permits can win: the others' nodes count
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
		case v := <-as.votes:
			st.add(v)
			if groups != nil && v.err == nil {
				groups[v.picks] = append(groups[v.picks], v.node)
			}
		case <-timer.C:
			for i := range n {
				if !as.nodes[i].voted.Load() {
					as.vote(i, &NodeTimeoutError{Timeout: timeout, Cause: q.nodes[i].Lane(p.res[0], p.acked).LastCause(), validity: timeout < cfg.nodeTimeout})
				}
			}
		case <-done:
			done = nil
			for i := range n {
				as.vote(i, ctx.Err())
			}
		}
	}
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
	v := vote{node: i, err: ne, acks: acks}
	if err == nil {
		v.picks = as.nodes[i].picks // written before its answer, by the same goroutine
	}
	as.votes <- v
}

// sending reports whether node i's call is still worth sending, as its lane
// is about to send it, and records the answer. A release is always sent (it
// only ever deletes our own value), and so is a fenced acquire's write-back
// unless its round failed (it only ever raises counters where our lock is,
// and a node that takes it after the quorum catches up).
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
	nc.state.Store(callSent)
	switch {
	case as.op == OpRelease:
		return true
	case as.op == OpFence && as.outcome.Load() != attemptLost:
		return true
	}
	var why error
	switch out := as.outcome.Load(); {
	case as.cleanup != nil && as.cleanup.failed.Load(), out == attemptLost:
		nc.voted.Store(true) // nobody waits for this vote any more
		as.skip(i)
		return false
	case out == attemptWon:
		// The lock's write: see above. Its answer is counted by nobody
		// (the collector has returned), but a semaphore's stray permits
		// are still released (answer).
		return true
	case as.ctx.Err() != nil:
		why = as.ctx.Err()
	case !time.Now().Before(as.deadline):
		why = &NodeTimeoutError{Timeout: as.timeout, validity: as.timeout < as.cfg.nodeTimeout}
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
	if err == nil && nc.picks != "" {
		as.stray(i) // a semaphore's node that took other permits than the quorum
	}
	if as.cleanup != nil && as.cleanup.failed.Load() {
		as.clean(i)
		if nc.awaited.Swap(false) {
			as.cleanup.pending.Done() // its release, if any, is pending now
		}
	}
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
	cl.pending.Add()
	nd := as.q.nodes[i]
	rc := &releaseCall{s: cl.s, cfg: as.cfg, node: nd, pending: &cl.pending, resources: len(as.keys)}
	rc.Call = lane.Call{Kind: lane.Cleanup, Hash: cl.s.Hash, Src: cl.s.Src, Keys: cl.keys, Args: append([]any{cl.value}, cl.args...),
		Timeout: as.cfg.nodeTimeout, H: rc}
	nd.Lane(as.keys[0], as.acked).Submit(&rc.Call)
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
