package redlock

import (
	"context"
	"time"
)

// Acquire, and where its options become a kind (kind.go): the one switch
// on them.

// Acquire locks resources for ttl on a quorum of nodes and returns the Lock.
// All resources are locked together or none is. With [WithFencing], the Lock
// also carries a fencing token ([Lock.Token]), at the cost of one more round
// trip. Failed attempts are retried
// as the options say (Default: 10 retries, 200ms ± 100ms apart); whatever a
// failed attempt wrote is released before the next one.
//
// The Lock's expiration is the start of the successful attempt + ttl - drift
// ([WithDriftFactor]); an attempt that reaches a quorum only after that time
// counts as failed. A failed Acquire returns once what it wrote has been
// released on every node it reached, waiting at most its attempt's timeout
// (the node timeout, or ttl − drift when shorter).
//
// Acquire returns an error matching [ErrInvalidArgument] for bad input (no or
// empty or duplicate resources, ttl not a positive whole number of
// milliseconds or not above the drift allowance, an option out of range),
// before anything is sent, and one matching [ErrClosed], sending nothing,
// once the Redlock is closed. Otherwise its error is an [*ExecutionError]
// that matches [ErrResourceLocked] on contention and ctx.Err() when ctx
// ended the call; a quorum lost to node failures matches neither.
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
