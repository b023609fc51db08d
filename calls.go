package redlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
)

// errReleaseStarted is the vote of a node whose extension was not sent
// because a release of the lock started (see plan.abandon).
var errReleaseStarted = errors.New("not sent: a release of the lock started")

// One node's call in an attempt: whether it is still sent when its lane
// gets to it (sending), how long the collector waits for it (expire: its
// timeout counts from when it is sent, not while its lane sets up a
// connection), and what its answer does (answer).

// expire votes against, with a *NodeTimeoutError, for each node whose
// time is up: its deadline (start + timeout, plus the time its lane spent
// setting up a connection before sending its call), or, for a node whose
// lane is still setting one up, the limit. It returns how long until the
// next node's time is up, or 0 when every node has voted.
func (as *attemptState) expire(p *plan) time.Duration {
	now := time.Now()
	var next time.Duration
	for i := range as.nodes {
		nc := &as.nodes[i]
		if nc.voted.Load() {
			continue
		}
		end := as.limit
		if dl := as.deadline.Add(time.Duration(nc.setUp.Load())); nc.state.Load() != callConnecting && dl.Before(end) {
			end = dl
		}
		if left := end.Sub(now); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		as.vote(i, as.timedOut(i, p))
	}
	return next
}

// timedOut is node i's vote when its time is up.
func (as *attemptState) timedOut(i int, p *plan) *NodeTimeoutError {
	l := as.q.nodes[i].Lane(p.res[0], p.acked)
	e := &NodeTimeoutError{Timeout: as.timeout, Cause: l.LastCause(), validity: as.timeout < as.cfg.nodeTimeout}
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
	deadline := as.deadline.Add(time.Duration(nc.setUp.Load()))
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
		nc.voted.Store(true) // nobody waits for this vote any more
		as.skip(i)
		return false
	case out == attemptWon:
		// The lock's write: see above. Its answer is counted by nobody
		// (the collector has returned), but a node's stray choice is
		// are still released (answer).
		return true
	case as.ctx.Err() != nil:
		why = as.ctx.Err()
	case !time.Now().Before(deadline), !time.Now().Before(as.limit):
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
