package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/script"
)

// The retry loop: one operation's attempts, the pauses between them, and
// what ends them. The quorum (quorum.go) runs each attempt; a plan says what
// the operation does differently.

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
	// cleanup releases what a failed attempt may have written before
	// anything else happens (the Redlock spec).
	cleanup bool
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
	// waits lets the call wait for a release announcement between attempts
	// (see WithWakeOnRelease).
	waits bool
	// until is the existing lock's expiration (extend, release); zero for
	// acquire.
	until time.Time
	// pastUntil is what happens once until has passed: the call ends
	// before an attempt (extend) or after one (release).
	pastUntil pastUntil
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
		ttl: ttl, freshValue: true, cleanup: true, contended: ErrResourceLocked, waits: true}
}

// extendPlan sets the ttl of lock's keys to ttl.
func extendPlan(lock *Lock, ttl time.Duration) *plan {
	return &plan{op: OpExtend, s: script.Extend, keys: lock.resources, res: lock.resources, args: []any{lock.value, int64(ttl / time.Millisecond)},
		ttl: ttl, until: lock.until(), pastUntil: refusePastUntil}
}

// releasePlan deletes lock's keys, counting until as the lock's expiration.
func releasePlan(lock *Lock, until time.Time) *plan {
	return &plan{op: OpRelease, s: script.Release, keys: lock.resources, res: lock.resources, args: []any{lock.value},
		until: until, pastUntil: oneAttemptPastUntil}
}

// outcome is what execute settled on.
type outcome struct {
	attempts []ExecutionStats
	tries    int             // attempts made
	win      *ExecutionStats // the successful attempt, or nil
	value    string          // acquire: the successful attempt's value
	token    uint64          // fenced acquire: the successful attempt's token
	err      *ExecutionError
}

// execute runs p until an attempt succeeds, the retries are used up, ctx
// ends, or the outcome cannot change by retrying (the lock lost for good, or
// nodes refusing what retrying cannot fix).
func (r *Redlock) execute(ctx context.Context, cfg *config, p *plan) outcome {
	var o outcome
	start := time.Now()
	// Each attempt waits for the nodes for at most the node timeout, and
	// never past the validity of the ttl it writes (an answer after that
	// could not be used); a failed Acquire waits as long for its cleanup.
	timeout := cfg.nodeTimeout
	var d time.Duration
	if p.ttl > 0 {
		d = drift(cfg.driftFactor, p.ttl)
		timeout = min(timeout, p.ttl-d)
	}
	tries := 0
	var cleaning *cleanup // the last failed attempt's release of its writes
	args := p.args
	// deleted marks, for a release, the nodes that deleted the value in any
	// attempt of the call (an answer that came late included): they count
	// for in later attempts, where the value is gone by our own doing.
	var deleted []atomic.Bool
	if p.op == OpRelease {
		deleted = make([]atomic.Bool, r.size())
	}
	fail := func(e *ExecutionError) outcome {
		e.Op, e.Resources, e.Attempts, e.tries, e.took = p.op, p.res, o.attempts, tries, time.Since(start)
		o.err, o.tries = e, tries
		// A failed Acquire returns once its cleanup has been answered (by
		// the nodes that answered the acquire, within a node timeout), as
		// node-redlock does: a process that exits right after leaves
		// nothing behind (on nodes whose round trip takes less than half
		// the wait). A call cut short by ctx does not wait.
		if cleaning != nil && ctx.Err() == nil {
			cleaning.await(ctx, timeout)
		}
		return o
	}
	if err := ctx.Err(); err != nil {
		return fail(&ExecutionError{reason: "not attempted", ctxErr: err})
	}
	n, q := r.size(), r.needed()
	unlimited := cfg.retryCount == -1
	window := time.Now().Add(time.Duration(max(cfg.retryCount, 0)) * cfg.retryDelay) // free wakes end here
	var last *ExecutionError                                                         // why the last attempt that ctx did not cut short failed
	// A waiting Acquire wakes when one of its resources is released. It
	// joins the waiters after its first failed attempt, so that an
	// uncontended Acquire pays nothing; a release between that attempt and
	// joining costs at most one retry delay.
	waits := p.waits && cfg.wake && cfg.retryCount != 0
	var wake *waiter
	defer func() { r.unregister(wake, o.win != nil) }()
	// A call that may wait queues behind this Redlock's waiters for the same
	// resources, when there are any, before its first attempt: trying at
	// once would jump the queue, and could split the nodes with the head's
	// attempt at the next release.
	if waits {
		if wake = r.queueBehindWaiters(p.res); wake != nil {
			if !sleepOrWake(ctx, retryDelay(cfg), wake.channel()).alive {
				return fail(&ExecutionError{reason: "not attempted", ctxErr: ctx.Err()})
			}
		}
	}
	for i := 0; ; i++ {
		if p.pastUntil == refusePastUntil && !time.Now().Before(p.until) {
			return fail(&ExecutionError{reason: "cannot extend an already-expired lock", sentinel: ErrLockExpired})
		}
		if p.freshValue {
			// A fresh slice: the previous attempt's calls may still read theirs.
			o.value = randomValue()
			args = []any{o.value, p.args[1]}
		}
		tries++
		began := time.Now()
		st, as := r.attempt(ctx, cfg, p, args, deleted, timeout)
		if p.fenced && len(st.VotesFor) >= q && time.Since(st.Start) < p.ttl-d {
			st, o.token = r.writeBack(ctx, cfg, p, o.value, st, as, p.ttl-d)
		}
		if len(st.VotesFor) >= q && p.ttl > 0 && time.Since(st.Start) >= p.ttl-d {
			st.Late = true
		}
		if unlimited {
			o.attempts = append(o.attempts[:0], st) // keep the last only
		} else {
			o.attempts = append(o.attempts, st)
		}
		if obs := cfg.observer; obs != nil && obs.Attempt != nil {
			info := AttemptInfo{Op: p.op, Resources: append([]string(nil), p.res...), Number: tries, Stats: cloneStats(st), Took: time.Since(began),
				Won: len(st.VotesFor) >= q && !st.Late}
			if p.ttl > 0 {
				info.Validity, info.Drift = p.ttl-d, d
			}
			safely(obs.Attempt, info)
		}
		if len(st.VotesFor) >= q && !st.Late {
			o.win, o.tries = &o.attempts[len(o.attempts)-1], tries
			return o
		}
		held, refusals := 0, 0 // votes "held by another" / "no longer ours"; refusals retrying cannot fix
		var refusal *NodeError
		for _, v := range st.VotesAgainst {
			switch {
			case isLocked(v.Err) && v.Op == p.op: // a write-back's "gone" is not contention
				held++
			case refused(v.Err) != nil:
				if refusals++; refusal == nil {
					refusal = v
				}
			}
		}
		// A failed attempt releases what it may have written before
		// anything else happens (node-redlock v5 keeps partial holds across
		// retries, and waiters on one resource can then split the nodes
		// between them until they give up). Only a node that said "held by
		// another" surely wrote nothing; a vote for, an error, or no answer
		// yet may all mean a write. The release runs even when ctx has
		// ended, and is not waited for here.
		if p.cleanup && held < n {
			cleaning = as.releaseWrites()
		}
		// A quorum of "not held" for extend or release cannot change by
		// retrying: the value is gone from those nodes for good.
		if p.contended == nil && held > n-q {
			return fail(&ExecutionError{reason: tally(p.op, st, held), sentinel: ErrLockExpired, against: st.VotesAgainst})
		}
		// Neither can a quorum out of reach for refusals: a wrong password,
		// an ACL, keys in different Cluster slots.
		if refusals > n-q {
			return fail(refusalError(refusal, refusals, n, st.VotesAgainst))
		}
		// Contention is judged on the last attempt that ctx did not cut
		// short: one cut mid-way holds ctx errors, not the nodes' answers.
		if err := ctx.Err(); err != nil {
			e := &ExecutionError{reason: "cut short", ctxErr: err}
			if last != nil {
				e.reason, e.sentinel, e.against = last.reason, last.sentinel, last.against
			}
			return fail(e)
		}
		last = &ExecutionError{reason: tally(p.op, st, held), against: st.VotesAgainst}
		if p.contended != nil && held > n-q {
			last.sentinel = p.contended
		}
		if p.pastUntil == oneAttemptPastUntil && !time.Now().Before(p.until) {
			last.reason = "the lock expired before it could be released, and one attempt did not find it on a quorum: " + last.reason
			last.sentinel = ErrLockExpired
			return fail(last)
		}
		if !unlimited && i >= cfg.retryCount {
			return fail(last)
		}
		if wake == nil && waits {
			wake = r.joinWaiters(p.res)
		}
		var s slept
		paused := time.Now()
		if p.freshValue && len(st.VotesFor) > 0 {
			// Some votes for, yet no quorum: another waiter took the rest.
			s = sleepOrWakeSpread(ctx, retryDelay(cfg), wake.channel())
		} else {
			s = sleepOrWake(ctx, retryDelay(cfg), wake.channel())
		}
		if obs := cfg.observer; obs != nil && obs.Wait != nil {
			safely(obs.Wait, WaitInfo{Op: p.op, Resources: append([]string(nil), p.res...), Waited: time.Since(paused), Woken: s.woken})
		}
		if !s.alive {
			e := *last
			e.ctxErr = ctx.Err()
			return fail(&e)
		}
		if s.woken && time.Now().Before(window) {
			// A wake is a free retry within the window the options
			// promise (retries × delay), whatever is announced; past it,
			// wakes count, so that a storm of them cannot retry for ever.
			i--
		}
	}
}

// slept is how a pause between attempts ended.
type slept struct {
	alive bool // ctx has not ended
	woken bool // a wake ended it early
}

// sleepFor waits for d, or until ctx ends.
func sleepFor(ctx context.Context, d time.Duration) slept {
	return sleepOrWake(ctx, d, nil)
}

// sleepOrWake waits for d, or for a wake (a nil channel: none), or until
// ctx ends.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) slept {
	if d <= 0 {
		return slept{alive: ctx.Err() == nil}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return slept{alive: true}
	case <-wake:
		return slept{alive: ctx.Err() == nil, woken: true}
	case <-ctx.Done():
		return slept{}
	}
}

// sleepOrWakeSpread is sleepOrWake for a waiter that just split the nodes
// with a competitor: waiters in other Redlocks (other processes) wake on the
// same announcement, so a wake is followed by a random pause of up to a
// millisecond, and one of them usually takes every node before the other
// tries.
func sleepOrWakeSpread(ctx context.Context, d time.Duration, wake <-chan struct{}) slept {
	s := sleepOrWake(ctx, d, wake)
	if s.woken {
		s.alive = sleepFor(ctx, time.Duration(mrand.Int64N(int64(time.Millisecond)))).alive
	}
	return s
}

// drift is the part of a ttl that is not trusted because the nodes' clocks
// may run at different rates: round(f*ttl) + 2ms, as in node-redlock (and
// the Redis distlock spec's "small constant" for the Redis expiry resolution).
//
// A drift that would reach the ttl is capped at the ttl (no validity left,
// which validateTTL refuses); the cap also keeps the conversion back to a
// Duration from overflowing for ttls near the largest Duration.
func drift(f float64, ttl time.Duration) time.Duration {
	ms := math.Round(f*float64(ttl/time.Millisecond)) + 2
	if ms >= float64(ttl/time.Millisecond) {
		return ttl
	}
	return time.Duration(ms) * time.Millisecond
}

// retryDelay returns delay + a uniform jitter in [-j, j), never below 0, as
// node-redlock's max(0, delay + floor((rand*2-1)*j)).
func retryDelay(cfg *config) time.Duration {
	d := cfg.retryDelay
	if j := cfg.retryJitter; j > 0 {
		d += time.Duration((mrand.Float64()*2 - 1) * float64(j))
	}
	return max(d, 0)
}

// valueLen is the length of a lock's value.
const valueLen = 32

// randomValue returns valueLen random hex characters, unique to one lock.
func randomValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}
