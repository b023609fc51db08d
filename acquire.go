package redlock

import (
	"context"
	"time"
)

// Acquire, and where its options become a kind (kind.go): the one switch
// on them.

// Acquire locks resources for ttl on a quorum of nodes and returns the Lock.
// All resources are locked together or none is. Failed attempts are retried
// as the options say (default: 10 retries, 200ms ± 100ms apart), and what a
// failed attempt wrote is released before the next. The Lock is valid until
// the successful attempt's start + ttl − drift ([WithDriftFactor]).
//
// Acquire returns an error matching [ErrInvalidArgument] for bad input (no,
// empty or duplicate resources, ttl not whole milliseconds above the drift
// allowance, an option out of range) and [ErrClosed] once the Redlock is
// closed, sending nothing; otherwise an [*ExecutionError] that matches
// [ErrResourceLocked] on contention and ctx.Err() when ctx ended the call.
func (r *Redlock) Acquire(ctx context.Context, resources []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := r.open(ctx, "acquire", resources); err != nil {
		return nil, err
	}
	refused := func(err error) (*Lock, error) {
		if oc, seen := observing(r, nil, opts); seen {
			oc.done(ctx, OpAcquire, append([]string(nil), resources...), time.Now(), nil, 0, err)
		}
		return nil, err
	}
	cfg, err := with(r.cfg, opts)
	if err == nil && len(opts) > 0 && cfg.given&givenThreshold != 0 {
		err = invalid("WithAutomaticExtensionThreshold given to Acquire, which does not extend: pass it to Using, Lead or New")
	}
	if err != nil {
		return refused(err)
	}
	if err := validateResources(resources); err != nil {
		return refused(err)
	}
	if err := validateTTL(ttl, cfg); err != nil {
		return refused(err)
	}
	if err := checkAck(r.nodes, cfg); err != nil {
		return refused(err)
	}
	return r.acquire(ctx, cfg, resources, ttl)
}

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

// acquire is Acquire after validation: the plan of cfg's kind.
func (r *Redlock) acquire(ctx context.Context, cfg *config, resources []string, ttl time.Duration) (*Lock, error) {
	keys := append([]string(nil), resources...) // the caller may reuse theirs
	k := kindFor(cfg)
	p := k.acquire(keys, ttl, cfg)
	p.handTag = tagOf(cfg, k, ttl)
	return r.grant(ctx, cfg, k, p)
}
