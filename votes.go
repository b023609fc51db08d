package redlock

import (
	"errors"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

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
}

// Sendable implements lane.Handler: see attemptState.sending.
func (nc *nodeCall) Sendable() bool { return nc.as.sending(nc.i) }

// Connecting implements lane.Connector: see attemptState.connecting.
func (nc *nodeCall) Connecting() { nc.as.connecting(nc.i) }

// Done implements lane.Handler: the node's answer is its vote.
func (nc *nodeCall) Done(r lane.Result) {
	rep, err := judge(nc.as.op, nc.s, len(nc.as.keys), r)
	nc.counter, nc.choice = rep.Counter, rep.Picks
	if x := nc.as.ext; x != nil {
		err = x.judge(nc.i, rep, err, nc.as.outcome.Load() == attemptWon, nc.state.Load() == callSent)
	}
	if err == nil && nc.Ack != nil {
		nc.acks = r.Acks
		err = judgeAcks(nc.Ack, r)
	}
	nc.as.answer(nc.i, err)
}

// Silent implements lane.Handler: the node did not answer in time, and
// votes against now; its answer, when it comes, still records what cleanup
// needs. A release sent again whose first run deleted every key stays a
// success, whatever its second run says.
func (nc *nodeCall) Silent(r lane.Result) {
	if x := nc.as.ext; x != nil {
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
	as := nc.as
	rc := &releaseCall{s: nc.s, cfg: as.cfg, node: as.q.nodes[nc.i], resources: len(as.keys)}
	if as.deleted != nil {
		rc.deleted = &as.deleted[nc.i]
	}
	rc.Call = lane.Call{Kind: lane.Cleanup, Hash: nc.Hash, Src: nc.Src, Keys: nc.Keys, Args: nc.Args, Timeout: nc.Timeout, H: rc}
	return &rc.Call
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
		return rep, &ResourceLockedError{Op: op, Applied: rep.Applied, Requested: rep.Resources, full: rep.NoRoom}
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
		nte := &NodeTimeoutError{Timeout: e.Timeout, CircuitOpen: e.CircuitOpen, Shard: e.Shard, Cause: e.Cause, RoundTrip: e.RoundTrip}
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
