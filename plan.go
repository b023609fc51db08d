package redlock

import (
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

// A plan is one operation as the retry loop runs it: its script and
// arguments, and the rules that differ between Acquire, Extend and Release.
// A new operation adds a plan, not a branch in execute.
type plan struct {
	op   Op
	s    *script.Script
	keys []string // the script's KEYS
	res  []string // the resources: the first of keys (a kind may add its own keys after them)
	// args are the script's ARGV; an acquire's value, args[0], is drawn
	// for each attempt (freshValue) into a copy of its own. A plan is
	// never written after it is made: what a call's attempts share (the
	// value, a release's deletes) is execute's.
	args []any

	// ttl, when set, is the ttl the operation writes: an attempt whose
	// quorum came after ttl - drift counts as failed (the Redlock spec's
	// step 4), and no node's answer is waited for past that.
	ttl time.Duration
	// freshValue draws a new random value into args[0] for every attempt,
	// so that the release of a failed attempt's writes can never delete a
	// later attempt's, whatever order the commands reach a node in.
	freshValue bool
	// undoFailed releases what a failed attempt may have written before
	// anything else happens (the Redlock spec).
	undoFailed bool
	// contended is the sentinel of a quorum of votes "held by another"
	// (ErrResourceLocked), or nil when such votes say the lock is lost for
	// good (extend, release: ErrLockExpired, and the call ends at once).
	contended error
	// acked: the lock waits for replicas (WithReplicaAck): its calls take
	// the nodes' acked lanes, releases included.
	acked bool
	// choices: each node's vote for may be for a choice of its own (the
	// reply's Picks), and only the nodes of one choice can make a quorum
	// (quorum.attempt).
	choices bool
	// undo, when set, is the script that releases a failed attempt's
	// writes (an acquire's), or a failed extension's (see dropOn), on
	// undoKeys with ARGV value, undoArgs... (a kind's own); else
	// script.Cleanup on the resources.
	undo     *script.Script
	undoKeys []string
	undoArgs []any
	// waits lets the call wait for a release announcement between attempts
	// (see WithWakeOnRelease).
	waits bool
	// handTag, when set, lets a holder of the same Redlock hand its lock
	// to the waiting call (see handover.go).
	handTag handTag
	// raises: the plan only raises what the lock's own keys hold (a
	// kind's second round, hooks.sealed): its calls are sent unless its
	// attempt was lost, and a node that takes one late catches up.
	raises bool
	// hooks are the kind's steps in the retry loop (kind.go); nil: none.
	hooks hooks
	// until is the existing lock's expiration (extend, release); zero for
	// acquire.
	until time.Time
	// pastUntil is what happens once until has passed: the call ends
	// before an attempt (extend) or after one (release).
	pastUntil pastUntil
	// abandon, for an extend, is set once a release of the lock started:
	// from then on the extension sends nothing and makes no new attempt,
	// since it would write back the keys that the release deletes.
	abandon *atomic.Bool
	// ext, for an extend, is what the call knows of the nodes that lost
	// the lock (see lost.go).
	ext *extension
}

// hook returns p's hooks.
func (p *plan) hook() hooks {
	if p.hooks == nil {
		return noHooks{}
	}
	return p.hooks
}

// handTag is what a waiter and a holder must share for a hand-over: the
// same ttl, whether the lock carries a token, and acknowledgement.
type handTag struct {
	ttl   time.Duration
	token bool
	ack   lane.Ack
	acked bool
}

// pastUntil says how an operation on an existing lock treats its expiration.
type pastUntil uint8

const (
	ignoreUntil         pastUntil = iota // acquire: no existing lock
	refusePastUntil                      // extend: an expired lock cannot be extended
	oneAttemptPastUntil                  // release: one attempt deletes what may be left
)

// acquirePlan locks keys for ttl.
func acquirePlan(keys []string, ttl time.Duration) *plan {
	// execute draws each attempt's value into args[0]; args[1] is the ttl.
	return &plan{op: OpAcquire, s: script.Acquire, keys: keys, res: keys, args: []any{nil, int64(ttl / time.Millisecond)},
		ttl: ttl, freshValue: true, undoFailed: true, contended: ErrResourceLocked, waits: true}
}

// newExtendPlan is the plan that sets the ttl of a lock's resources, which
// hold value until until, to ttl.
func newExtendPlan(resources []string, value string, until time.Time, ttl time.Duration) *plan {
	return &plan{op: OpExtend, s: script.Extend, keys: resources, res: resources, args: []any{value, int64(ttl / time.Millisecond)},
		ttl: ttl, until: until, pastUntil: refusePastUntil}
}

// newReleasePlan is the plan that deletes a lock's resources where they hold
// value, counting until as the lock's expiration.
func newReleasePlan(resources []string, value string, until time.Time) *plan {
	return &plan{op: OpRelease, s: script.Release, keys: resources, res: resources, args: []any{value},
		until: until, pastUntil: oneAttemptPastUntil}
}

// waiterID is the call's id among the waiters (hooks.waiter), or "".
func (p *plan) waiterID() string {
	id, _ := p.hook().waiter()
	return id
}
