package redlock

import "time"

// plainKind is the kind of the plain exclusive lock: the plans of plan.go,
// with no hooks.
type plainKind struct{}

func (plainKind) acquire(resources []string, ttl time.Duration, _ *config) *plan {
	return acquirePlan(resources, ttl)
}

func (k plainKind) won(*plan, *outcome) kind { return k }

func (plainKind) extend(l *Lock, ttl time.Duration) *plan {
	return newExtendPlan(l.resources, l.value, l.until(), ttl)
}

func (plainKind) release(l *Lock, until time.Time) *plan {
	return newReleasePlan(l.resources, l.value, until)
}

func (plainKind) handsOver() bool { return true }
