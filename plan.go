package redlock

import (
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// A plan is one operation as the retry loop runs it: its script and
// arguments, and the rules that differ between Acquire, Extend and Release.
// A new operation adds a plan, not a branch in execute.
type plan struct {
	op   Op
	s    *script.Script
	keys []string // the script's KEYS
	res  []string // the resources: keys, or, fenced, its first half
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
	// fenced: an attempt that reaches a quorum writes its fencing token
	// back (writeBack), and the write-back's quorum is the attempt's.
	fenced bool
	// undo, when set, is the script that releases a failed attempt's
	// writes, on undoKeys with ARGV value, undoArgs... (a semaphore's or a
	// shared lock's); else script.Cleanup on the resources.
	undo     *script.Script
	undoKeys []string
	undoArgs []any
	// waits lets the call wait for a release announcement between attempts
	// (see WithWakeOnRelease).
	waits bool
	// handTag, when set, lets a holder of the same Redlock hand its lock
	// to the waiting call (see handover.go).
	handTag handTag
	// queue is the waiter's id in the nodes' queues (WithFairQueue), and
	// live how long it keeps its place there without asking again; "" for
	// a call that does not queue.
	queue string
	live  time.Duration
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

// extendPlan sets the ttl of a lock's resources, which hold value until
// until, to ttl.
func extendPlan(resources []string, value string, until time.Time, ttl time.Duration) *plan {
	return &plan{op: OpExtend, s: script.Extend, keys: resources, res: resources, args: []any{value, int64(ttl / time.Millisecond)},
		ttl: ttl, until: until, pastUntil: refusePastUntil}
}

// releasePlan deletes a lock's resources where they hold value, counting
// until as the lock's expiration.
func releasePlan(resources []string, value string, until time.Time) *plan {
	return &plan{op: OpRelease, s: script.Release, keys: resources, res: resources, args: []any{value},
		until: until, pastUntil: oneAttemptPastUntil}
}
