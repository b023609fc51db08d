package redlock

import (
	"context"
	"errors"
	"time"
)

// Observer receives what happens inside a Redlock, for metrics, traces and
// logs (the module redlockotel turns it into OpenTelemetry). Each field is
// optional. Give it with [WithObserver], to New or to one call. The hooks
// are called synchronously, never while the engine holds a lock, with
// copies of its data: a hook cannot change the locking, but must return
// quickly. A hook that panics is recovered. Without an observer nothing is
// allocated for it.
type Observer struct {
	// Attempt is called after each attempt of an operation on every node.
	Attempt func(AttemptInfo)
	// Wait is called after each pause between two attempts.
	Wait func(WaitInfo)
	// Vote is called for each vote against, as WithErrorHandler's handler.
	Vote func(*NodeError)
	// Done is called when Acquire, Extend or Release (Using's own calls
	// included) returns.
	Done func(CallInfo)
	// Lost is called once for each lock the library learns was lost: an
	// Extend that found it gone from a quorum or its validity over (its
	// error matches ErrLockExpired), or Using's lock that could not be
	// extended (fn's context was cancelled).
	Lost func(LostInfo)
	// Released is called when a lock was released: a Release that
	// succeeded.
	Released func(ReleasedInfo)
	// Using is called when Using returns (after its own Acquire, Extend
	// and Release calls, which Done sees too).
	Using func(UsingInfo)
	// Connection is called once each time a node whose client [Open]
	// made stops or starts accepting connections (go-redis logs nothing
	// of it). Only with an observer given to Open.
	Connection func(ConnectionInfo)
}

// ConnectionInfo describes a node of [Open]'s that stopped (Up false) or
// started accepting connections.
type ConnectionInfo struct {
	Node int
	Addr string
	Up   bool
	Err  error // the failed dial's, when Up is false
}

// UsingInfo describes a call of Using that returned.
type UsingInfo struct {
	Ctx       context.Context
	Resources []string
	Start     time.Time
	Took      time.Duration
	Err       error // what Using returned
	Ran       bool  // fn ran (the lock was acquired)
	Lost      bool  // the lock was lost while fn ran
}

// AttemptInfo describes one attempt.
type AttemptInfo struct {
	Op        Op
	Resources []string
	Number    int            // 1 for the first attempt of the call
	Stats     ExecutionStats // its votes
	Took      time.Duration
	// Validity is what an acquire or extend gets: ttl − Drift; zero for a
	// release.
	Validity time.Duration
	Drift    time.Duration
	Won      bool // it reached a quorum in time
}

// WaitInfo describes one pause between attempts.
type WaitInfo struct {
	Op        Op
	Resources []string
	Waited    time.Duration
	Woken     bool // a release announcement ended it (WithWakeOnRelease), not the delay
}

// CallInfo describes a call of Acquire, Extend or Release that returned.
type CallInfo struct {
	Ctx       context.Context // the caller's
	Op        Op
	Resources []string
	Start     time.Time
	Took      time.Duration
	Tries     int              // attempts made
	Attempts  []ExecutionStats // their statistics (the last only with unlimited retries); not to be changed
	Err       error            // nil on success
	Outcome   Outcome
	Token     uint64 // a fenced Acquire's token
}

// LostInfo describes a lock that was lost: an Extend found it gone, or Using
// could not keep it.
type LostInfo struct {
	Ctx       context.Context
	Resources []string
	Held      time.Duration // from the grant to the loss
	Err       error         // the extension's error
}

// ReleasedInfo describes a lock that was released.
type ReleasedInfo struct {
	Resources []string
	Held      time.Duration // from the grant (the successful attempt's start) to the release
}

// Outcome is how a call ended, in few enough values for a metric label.
type Outcome string

// The outcomes.
const (
	OutcomeOK          Outcome = "ok"
	OutcomeContention  Outcome = "contention"   // ErrResourceLocked: held by another
	OutcomeExpired     Outcome = "expired"      // ErrLockExpired: the lock is gone
	OutcomeCanceled    Outcome = "canceled"     // the caller's ctx ended the call
	OutcomeInvalid     Outcome = "invalid"      // ErrInvalidArgument or ErrClosed: refused before anything was sent
	OutcomeNodeFailure Outcome = "node_failure" // no quorum for other reasons: nodes failed or refused
)

// OutcomeOf classifies err as returned by Acquire, Extend or Release. An
// error that matches several (a wait for a contended lock cut short by its
// ctx matches ErrResourceLocked and the ctx's error) takes the first of
// invalid, contention, expired, canceled.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrClosed):
		return OutcomeInvalid
	case errors.Is(err, ErrResourceLocked):
		return OutcomeContention
	case errors.Is(err, ErrLockExpired):
		return OutcomeExpired
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	}
	return OutcomeNodeFailure
}

// WithObserver sets the observer of the calls (see [Observer]); nil turns
// it off. Default: none.
func WithObserver(o *Observer) CallOption {
	return func(c *config) { c.observer = o }
}

// safely runs a hook, recovering a panic in it.
func safely[T any](hook func(T), v T) {
	if hook == nil {
		return
	}
	defer func() { _ = recover() }()
	hook(v)
}

// observesDone reports whether cfg has an observer with a Done hook.
func (cfg *config) observesDone() bool {
	return cfg != nil && cfg.observer != nil && cfg.observer.Done != nil
}

// done reports a returned call to cfg's observer, if any.
func (cfg *config) done(ctx context.Context, op Op, resources []string, start time.Time, o *outcome, token uint64, err error) {
	if !cfg.observesDone() {
		return
	}
	info := CallInfo{Ctx: ctx, Op: op, Resources: resources, Start: start, Took: time.Since(start), Err: err, Outcome: OutcomeOf(err), Token: token}
	if o != nil {
		info.Tries = o.tries
		if o.attempts != nil {
			info.Attempts = make([]ExecutionStats, len(o.attempts))
			for i, st := range o.attempts {
				info.Attempts[i] = cloneStats(st)
			}
		}
	}
	safely(cfg.observer.Done, info)
}

// cloneStats returns a copy of st that shares nothing the engine uses (the
// NodeErrors are copies too; the errors in them are the engine's, and must
// not be changed).
func cloneStats(st ExecutionStats) ExecutionStats {
	st.VotesFor = append([]int(nil), st.VotesFor...)
	st.ReplicaAcks = append([]int(nil), st.ReplicaAcks...)
	if st.VotesAgainst != nil {
		va := make([]*NodeError, len(st.VotesAgainst))
		for i, v := range st.VotesAgainst {
			cp := *v
			va[i] = &cp
		}
		st.VotesAgainst = va
	}
	return st
}

// observing returns the config whose observer sees a call made with opts
// (on lock, when given, or on r's defaults), options applied but not
// validated, so that a call refused for a bad option is seen too; and
// whether there is an observer with a Done hook. It allocates nothing.
func observing[O Option](r *Redlock, lock *Lock, opts []O) (config, bool) {
	if r == nil || r.cfg == nil {
		return config{}, false
	}
	base := r.cfg
	if lock != nil && lock.redlock == r && lock.cfg != nil {
		base = lock.cfg
	}
	if len(opts) == 0 {
		// No copy of base is addressed: it stays on the stack.
		return *base, base.observer != nil && base.observer.Done != nil
	}
	c := *base
	apply(&c, opts)
	return c, c.observer != nil && c.observer.Done != nil
}
