package redlock

import (
	"context"
	"sync/atomic"
	"time"
)

// Lock is a lock held on a quorum of nodes, as returned by Acquire and
// Extend. Its fields are fixed when it is made: Extend returns a new Lock
// and spends this one, so that no two goroutines ever see a Lock change under
// them. A Lock is safe for concurrent use; a nil or zero *Lock is safe to
// Extend or Release (both return an error matching ErrInvalidArgument).
type Lock struct {
	redlock    *Redlock
	cfg        *config // the options it was acquired with
	resources  []string
	value      string
	expiration time.Time
	attempts   []ExecutionStats
	// spent is set once the lock has been released or extended; its
	// handle must no longer act on the keys, which a newer Lock with the
	// same value may hold.
	spent atomic.Bool
	// releasing is set once a release has sent anything: from then on the
	// lock may be gone from a quorum, even if the release failed.
	releasing atomic.Bool
}

// Resources returns a copy of the locked resources, in the order given.
func (l *Lock) Resources() []string {
	if l == nil {
		return nil
	}
	return append([]string(nil), l.resources...)
}

// Value returns the lock's random value (32 hex characters), which every
// node stores under each resource.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Expiration returns the time until which the lock is held: the start of
// the successful attempt + ttl - drift. It returns the zero time once the
// lock has been extended, or a release of it has been attempted.
func (l *Lock) Expiration() time.Time {
	if l == nil || l.spent.Load() || l.releasing.Load() {
		return time.Time{}
	}
	return l.expiration
}

// Valid reports whether the lock is still held by its own account: not
// extended, no release of it attempted (even one that failed: its deletes may
// have landed), and its expiration not yet reached. It asks no node.
func (l *Lock) Valid() bool {
	return l != nil && !l.spent.Load() && !l.releasing.Load() && time.Now().Before(l.expiration)
}

// Attempts returns the statistics of the attempts that produced this lock
// (only the last one when retries were unlimited).
func (l *Lock) Attempts() []ExecutionStats {
	if l == nil {
		return nil
	}
	return l.attempts
}

// Extend is shorthand for l's Redlock's [Redlock.Extend](ctx, l, ttl, opts...).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration, opts ...Option) (*Lock, error) {
	if l == nil {
		return nil, invalid("nil lock")
	}
	if l.redlock == nil {
		return nil, invalid("zero Lock: locks come from Acquire or Extend")
	}
	return l.redlock.Extend(ctx, l, ttl, opts...)
}

// Release is shorthand for l's Redlock's [Redlock.Release](ctx, l, opts...).
func (l *Lock) Release(ctx context.Context, opts ...Option) (*ExecutionResult, error) {
	if l == nil {
		return nil, invalid("nil lock")
	}
	if l.redlock == nil {
		return nil, invalid("zero Lock: locks come from Acquire or Extend")
	}
	return l.redlock.Release(ctx, l, opts...)
}
