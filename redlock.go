package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/wake"
)

// Redlock runs the Redlock algorithm over N independent Redis nodes: a lock
// is held when a majority (quorum n/2+1) of nodes hold its random value.
//
// A Redlock is safe for concurrent use by multiple goroutines and must not
// be copied. New starts no goroutine. Each node has at most one worker
// sending its calls, plus at most 4 parked on it while it does not answer
// (see [WithNodeTimeout]); they end when the node answers. The subscriptions that
// wake waiting Acquires (one goroutine per node, started by the first
// Acquire that waits) end with [Redlock.Close]. It does not own the clients
// given to New: closing them is the caller's job ([Open]'s are its own).
type Redlock struct {
	quorum  // the nodes, and the attempt that runs on them all
	cfg     *config
	wake    *wake.Waker             // waiting Acquires and the subscriptions that wake them, see WithWakeOnRelease
	workers flight.Flight           // every node worker and held release (see internal/lane)
	servers lane.Servers            // which node is which server
	terms   termSet                 // the live terms of its elections, which Close resigns
	owned   []redis.UniversalClient // the clients Open made, which Close closes
	closed  atomic.Bool             // set by Close: a call that takes something new is refused (see open)
}

// Nodes returns the number of nodes (the membership size).
func (r *Redlock) Nodes() int {
	if r == nil {
		return 0
	}
	return r.size()
}

// Quorum returns how many nodes must vote for an operation: n/2+1.
func (r *Redlock) Quorum() int {
	if r == nil {
		return 0
	}
	return r.needed()
}

// Extend sets the ttl of lock's resources to ttl from now on a quorum of
// nodes and returns a new Lock with the new expiration; lock itself can no
// longer be extended (a Release through it still releases). Options start
// from those lock was acquired with. A node that lost the lock's keys does
// not count for it: a lost lock stays lost.
//
// Extend returns an error matching [ErrInvalidArgument] for a nil Lock, a
// Lock of another Redlock, a bad ttl or option, or a Lock being extended
// concurrently; an [*ExecutionError] matching [ErrLockExpired], at once,
// when the validity has passed, the handle was already extended or
// released, or no quorum holds the lock; matching ctx.Err() when ctx ended
// the call; and matching neither when node failures kept it from a quorum.
func (r *Redlock) Extend(ctx context.Context, lock *Lock, ttl time.Duration, opts ...CallOption) (*Lock, error) {
	oc, seen := observing(r, lock, opts)
	if !seen {
		return r.extend(ctx, lock, ttl, opts, nil)
	}
	start := time.Now()
	var o outcome
	nl, err := r.extend(ctx, lock, ttl, opts, &o)
	oc.done(ctx, OpExtend, lock.Resources(), start, &o, 0, err)
	return nl, err
}

// extend is Extend; out, when not nil, receives the outcome of the
// attempts when any were made.
func (r *Redlock) extend(ctx context.Context, lock *Lock, ttl time.Duration, opts []CallOption, out *outcome) (*Lock, error) {
	if err := r.owns(ctx, lock); err != nil {
		return nil, err
	}
	cfg, err := with(lock.cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := validateTTL(ttl, cfg); err != nil {
		return nil, err
	}
	if err := checkAck(r.nodes, cfg); err != nil {
		return nil, err
	}
	spent := func(reason string) error {
		return &ExecutionError{Op: OpExtend, Resources: lock.resources, reason: reason, sentinel: ErrLockExpired}
	}
	switch {
	case lock.extended.Load():
		return nil, spent("this Lock was already extended: extend the Lock that Extend returned")
	case lock.life.releasing.Load():
		return nil, spent("a release of the lock was attempted, so it may be gone")
	case lock.life.forcedError() != nil:
		return nil, lock.life.forcedError()
	case lock.life.gone.Load():
		return nil, spent("an earlier Extend found the lock gone from a quorum of nodes: a lost lock stays lost (acquire it again)")
	case !lock.extending.CompareAndSwap(false, true):
		return nil, invalid("another goroutine is extending this Lock: extend the Lock that its Extend returns")
	case !lock.life.beginExtend(): // a release started meanwhile
		lock.extending.Store(false)
		return nil, spent("a release of the lock was attempted, so it may be gone")
	}
	p := lock.extendPlan(ttl)
	p.acked = lock.cfg.ack != nil
	p.abandon = &lock.life.releasing
	p.ext = r.newExtension(lock, cfg, p)
	// From the first PEXPIRE on, the keys may expire at now + ttl: before
	// this handle's expiration when ttl is shorter than what is left. The
	// handle is held no longer than that, whether the Extend succeeds or not.
	lock.cut.Store(time.Now().Add(ttl - drift(cfg.driftFactor, ttl)).UnixNano())
	o := r.execute(ctx, cfg, p)
	if out != nil {
		*out = o
	}
	if o.err != nil {
		lock.life.endExtend(lock.cut.Load())
		lock.extending.Store(false)
		expired := errors.Is(o.err, ErrLockExpired)
		if o.tries > 0 {
			// What it wrote back goes; all of the lock when it is lost.
			p.ext.failedFor(r.size(), expired)
		}
		if expired {
			// Gone from a quorum, or its validity over: the lock is lost.
			lock.life.gone.Store(true)
			r.unhold(lock.life)
			lock.life.reportLost(ctx, cfg, lock.resources, o.err)
		}
		return nil, o.err
	}
	for i := range p.ext.lost {
		p.ext.lost[i].Store(false) // a quorum held it without them: they hold it again
	}
	lock.extended.Store(true)
	nl := &Lock{
		redlock:    r,
		cfg:        lock.cfg,
		resources:  lock.resources,
		value:      lock.value,
		token:      lock.token,
		kind:       lock.kind,
		expiration: o.win.Start.Add(ttl - drift(cfg.driftFactor, ttl)),
		attempts:   o.attempts,
		life:       lock.life,
	}
	lock.life.extendedTo(nl.expiration)
	lock.life.last.Store(nl.expiration.UnixNano())
	lock.life.lastTTL.Store(int64(ttl))
	lock.life.endExtend(0)
	return nl, nil
}

// Release deletes the lock's resources on every node that still holds its
// value, and succeeds when a quorum did; every handle of the lock is spent
// once anything was sent. Options start from the lock's. A Release whose ctx
// has already ended still makes one attempt, bounded by the node timeout, so
// that `defer lock.Release(ctx)` does not leave the lock held for its ttl.
// It returns [ErrInvalidArgument] for a nil Lock, another Redlock's, or an
// option out of range (releasing all the same); an [*ExecutionError]
// matching [ErrLockExpired] when the lock was already released or is held by
// no quorum, ctx.Err() when ctx ended the call, neither on node failures.
func (r *Redlock) Release(ctx context.Context, lock *Lock, opts ...ReleaseOption) (*ExecutionResult, error) {
	oc, seen := observing(r, lock, opts)
	if !seen {
		return r.release(ctx, lock, opts, nil)
	}
	start := time.Now()
	var o outcome
	res, err := r.release(ctx, lock, opts, &o)
	oc.done(ctx, OpRelease, lock.Resources(), start, &o, 0, err)
	return res, err
}

// release is Release; out, when not nil, receives the outcome of the
// attempts when any were made.
func (r *Redlock) release(ctx context.Context, lock *Lock, opts []ReleaseOption, out *outcome) (*ExecutionResult, error) {
	if err := r.owns(ctx, lock); err != nil {
		return nil, err
	}
	cfg, err := with(lock.cfg, opts)
	if err == nil && len(opts) > 0 && cfg.given&givenDrift != 0 {
		err = invalid("WithDriftFactor given to Release, which writes no ttl: drop it")
	}
	if err != nil {
		// Release never refuses a lock it holds: it goes on with every
		// option that is valid on its own, and says what was wrong.
		cfg = lock.cfg
		for _, o := range opts {
			if c, e := with(cfg, []ReleaseOption{o}); e == nil && c.given&givenDrift == 0 {
				cfg = c
			}
		}
		res, rerr := r.releaseWith(ctx, lock, cfg, out)
		return res, errors.Join(fmt.Errorf("%w (ignored: the release went on without it)", err), rerr)
	}
	return r.releaseWith(ctx, lock, cfg, out)
}

// releaseWith is release with its settings.
func (r *Redlock) releaseWith(ctx context.Context, lock *Lock, cfg *config, out *outcome) (*ExecutionResult, error) {
	life := lock.life
	handed, before := r.startRelease(lock, cfg) // before anything is sent; see Valid
	if life.released.Load() || before {
		return nil, &ExecutionError{Op: OpRelease, Resources: lock.resources, reason: "the lock was already released", sentinel: ErrLockExpired}
	}
	if handed {
		return r.released(lock, cfg, &ExecutionResult{Start: time.Now(), HandedOver: true}), nil
	}
	ended := ctx.Err()
	if ended != nil {
		// One attempt all the same, bounded by the node timeout.
		one := *cfg
		one.retryCount = 0
		cfg, ctx = &one, context.WithoutCancel(ctx)
	}
	rp := lock.releasePlan(time.Unix(0, life.until.Load()))
	rp.acked = lock.cfg.ack != nil
	o := r.execute(ctx, cfg, rp)
	if out != nil {
		*out = o
	}
	if o.err != nil {
		if errors.Is(o.err, ErrLockExpired) {
			life.released.Store(true)
		}
		if ended != nil && o.err.ctxErr == nil {
			o.err.ctxErr = ended
			o.err.afterCtx = true
		}
		return nil, o.err
	}
	return r.released(lock, cfg, &ExecutionResult{Attempts: o.attempts, Start: o.win.Start}), nil
}

// closeWait is the longest Close waits for what is still in flight, unless
// two node timeouts are longer.
const closeWait = time.Second

// Close ends the Redlock: it resigns its live terms, ends its subscriptions,
// sends at once the releases held for silent nodes, waits for them and the
// calls in flight (at most a second, or two node timeouts), then closes the
// clients that [Open] made. After Close, every call that takes something
// new returns [ErrClosed] at once, sending nothing; Extend and Release of
// the locks taken before are still sent. Close is idempotent and safe for
// concurrent use; it returns an error when something still waited for a
// silent node, and leaves no goroutine behind.
func (r *Redlock) Close() error {
	if r == nil || r.wake == nil { // nil, or not made by New
		return nil
	}
	r.closed.Store(true) // nothing new from here on: what Close waits for only ends
	// One deadline for everything Close waits for, its terms included.
	wait := max(closeWait, 2*r.cfg.nodeTimeout)
	deadline := time.Now().Add(wait)
	// Terms end first: their contexts, then their releases.
	r.terms.close(deadline)
	// The waiters wake at once, and end with ErrClosed (see execute).
	subs, first := r.wake.Close()
	if !first {
		return nil
	}
	// Held releases go out now, past their breakers: the node may have
	// come back since their last try.
	for _, nd := range r.nodes {
		nd.Flush()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for _, g := range []struct {
		f    *flight.Flight
		what string
	}{{subs, "a subscription is still connecting to"}, {&r.workers, "a call or a release is still waiting for"}} {
		select {
		case <-g.f.Wait():
		case <-t.C:
			r.workers.Stop()
			closeAll(r.owned)
			return fmt.Errorf("redlock: close: %s a node that has not answered after %v; a call ends when the client's "+
				"read times out or the client is closed, and a release not sent by then is given up", g.what, wait)
		}
	}
	r.workers.Stop()
	closeAll(r.owned)
	return nil
}

// closeAll closes clients, whose errors (a client already closed) say
// nothing the caller can act on.
func closeAll(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}
