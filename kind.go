package redlock

import "time"

// Kinds. Each primitive is a kind: the plain exclusive lock (plainKind,
// below), the fenced lock (fenced.go), the semaphore (semaphore.go), the
// shared lock (shared.go), the fair queue's lock (fair.go) and an
// election's term (election.go). A kind makes the plans of its locks'
// operations and gives the retry loop its hooks; the engine (engine.go,
// attempt.go) runs plans and calls hooks, and names no kind
// (TestEngineNamesNoKind); kindFor (below) is the one switch on the
// options. A Lock carries its kind; hand-over in one process (handover.go)
// is the part of the kinds that allow it.

// kind is one primitive, and what a lock of it keeps of its grant.
type kind interface {
	// acquire returns the plan of an acquire of resources for ttl under
	// cfg: one plan per call.
	acquire(resources []string, ttl time.Duration, cfg *config) *plan
	// won returns the kind of the lock that o won running p (with what
	// the lock keeps of its grant: a semaphore's permits, a fair
	// waiter's place).
	won(p *plan, o outcome) kind
	// extend and release return the plans that extend l by ttl, and
	// release it counting until as its expiration.
	extend(l *Lock, ttl time.Duration) *plan
	release(l *Lock, until time.Time) *plan
	// handsOver reports whether a Release may hand a lock of the kind to
	// a waiter of the same Redlock (WithHandOver).
	handsOver() bool
}

// hooks are what a kind does in the retry loop besides sending its
// scripts; a plan without hooks has noHooks'. A kind's hooks may hold the
// state of one call: a plan is made per call.
type hooks interface {
	// waiter returns the call's id among the waiters ("" for none), and
	// whether it joins them before its first attempt and tries at once
	// (instead of queueing behind them: see execute).
	waiter() (id string, atOnce bool)
	// sealed runs after an attempt that reached a quorum within the
	// validity: a second round, whose votes become the attempt's, and
	// the token it grants.
	sealed(c *run, p *plan, st ExecutionStats, as *attemptState) (ExecutionStats, uint64)
	// failed runs after a failed attempt that the call goes on from.
	failed(c *run, p *plan, st ExecutionStats, as *attemptState)
	// granted reports whether the nodes granted the waiting call the lock
	// without a winning attempt, and fills c.o then.
	granted(c *run, p *plan) bool
	// pause returns how long the call waits at most between attempts,
	// given the retry delay d, and whether a wake after a split is
	// spread (see sleepOrWakeSpread).
	pause(d time.Duration) (time.Duration, bool)
	// gaveUp runs when the call ends without the lock after an attempt.
	gaveUp(c *run, p *plan)
	// adoptHanded is the waiter's step before it takes a lock handed over
	// in the process; it reports false when the lock cannot be taken.
	adoptHanded(c *run, p *plan, off *handOff) bool
	// quiet reports whether the waiting call makes no attempt when its
	// pause ends without a wake (something else keeps its place: see
	// run.behind).
	quiet(c *run, p *plan) bool
	// ended runs when the call ends, whatever its outcome.
	ended(c *run, p *plan)
}

// noHooks are the hooks of the plain lock: nothing more.
type noHooks struct{}

func (noHooks) waiter() (string, bool) { return "", false }
func (noHooks) sealed(_ *run, _ *plan, st ExecutionStats, _ *attemptState) (ExecutionStats, uint64) {
	return st, 0
}
func (noHooks) failed(*run, *plan, ExecutionStats, *attemptState) {}
func (noHooks) granted(*run, *plan) bool                          { return false }
func (noHooks) pause(d time.Duration) (time.Duration, bool)       { return d, true }
func (noHooks) gaveUp(*run, *plan)                                {}
func (noHooks) adoptHanded(*run, *plan, *handOff) bool            { return true }
func (noHooks) quiet(*run, *plan) bool                            { return false }
func (noHooks) ended(*run, *plan)                                 {}

// kindFor returns the kind of lock that cfg asks for.
func kindFor(cfg *config) kind {
	switch {
	case cfg.shared:
		return sharedKind{}
	case cfg.permits > 1:
		return semaphoreKind{permits: cfg.permits}
	case cfg.fencing:
		return fencedKind{}
	case cfg.fair:
		return fairKind{}
	}
	return plainKind{}
}

// waitingKind is a kind whose lock may be handed to a waiter by id (the
// fair queue's): a release announced to that id is the lock's too.
type waitingKind interface{ waiterID() string }

// plainKind is the kind of the plain exclusive lock: the plans of engine.go,
// with no hooks.
type plainKind struct{}

func (plainKind) acquire(resources []string, ttl time.Duration, _ *config) *plan {
	return acquirePlan(resources, ttl)
}

func (k plainKind) won(*plan, outcome) kind { return k }

func (plainKind) extend(l *Lock, ttl time.Duration) *plan {
	return extendPlanWith(l.resources, l.life.valueArg(l.value), l.until(), ttl)
}

func (plainKind) release(l *Lock, until time.Time) *plan {
	return releasePlanWith(l.resources, l.life.valueArgs(l.value), until)
}

func (plainKind) handsOver() bool { return true }
