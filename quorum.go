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
	limit   time.Time
	votes   chan vote // room for every node: a send never blocks
	nodes   []nodeCall
	outcome atomic.Int32
	// cleanup is set for an operation whose failed attempts release what
	// they wrote (acquire).
	cleanup *cleanup
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
	as := &attemptState{q: q, cfg: cfg, op: p.op, ctx: ctx, keys: p.res, raises: p.raises, acked: p.acked, timeout: timeout, deadline: st.Start.Add(timeout),
		votes: make(chan vote, n), nodes: make([]nodeCall, n), deleted: deleted}
	as.limit, as.abandon, as.ext = as.deadline, p.abandon, p.ext
	if p.ttl > 0 {
		as.limit = st.Start.Add(p.ttl - drift(cfg.driftFactor, p.ttl))
	}
	if p.undoFailed {
		as.cleanup = &cleanup{value: args[0], s: script.Cleanup, keys: p.res}
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
		case v := <-as.votes:
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
		v.choice = as.nodes[i].choice // written before its answer, by the same goroutine
	}
	as.votes <- v
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
	sendCleanup(as.cfg, as.q.nodes[i], cl.s, as.keys, cl.keys, append([]any{cl.value}, cl.args...), as.acked, &cl.pending)
}

// sendCleanup sends s (a release of one value, announcing nothing) to nd
// on its own, for resources (the first routes it) with KEYS keys and ARGV
// args; pending, when set, is told once it is answered.
func sendCleanup(cfg *config, nd *lane.Node, s *script.Script, resources, keys []string, args []any, acked bool, pending *flight.Flight) {
	rc := &releaseCall{s: s, cfg: cfg, node: nd, pending: pending, resources: len(resources)}
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
