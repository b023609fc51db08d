package redlock

import (
	"context"
	"errors"
	"time"
)

// Using runs fn while holding a lock on resources, acquired with opts and
// extended by ttl while fn runs, and releases it when fn returns (even if ctx
// ended or fn panicked). When the lock cannot be kept (taken over, gone,
// force-released, or not extended by its cancel point, shortly before its
// validity ends), fn's context ends with a cause matching
// [ErrExtensionFailed], and so does Using's error even if fn returned nil.
// If the acquire fails, fn never runs and its error is returned. Using
// returns fn's error with a release error joined; [ErrInvalidArgument] for
// a nil fn, a ttl below the extension threshold + 100ms, or what Acquire
// refuses; [ErrClosed] once the Redlock is closed.
func (r *Redlock) Using(ctx context.Context, resources []string, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if err := r.open(ctx, "using", resources); err != nil {
		return err
	}
	ran := false
	if oc, _ := observing(r, nil, opts); oc.observer != nil && oc.observer.Using != nil {
		hook, start := oc.observer.Using, time.Now()
		defer func() { // after the release, below
			safely(hook, UsingInfo{Ctx: ctx, Resources: append([]string(nil), resources...), Start: start, Took: time.Since(start),
				Err: err, Ran: ran, Lost: errors.Is(err, ErrExtensionFailed)})
		}()
	}
	cfg, err := with(r.cfg, opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil fn")
	}
	if err := validateResources(resources); err != nil {
		return err
	}
	if err := validateTTL(ttl, cfg); err != nil {
		return err
	}
	// node-redlock's rule: the lock must outlive the threshold by 100ms, or
	// it would need extending before fn could do anything. (Written so that
	// no sum can overflow.)
	if ttl-100*time.Millisecond < cfg.extensionThreshold {
		return invalid("ttl %v is less than the automatic extension threshold %v + 100ms: give Using a longer ttl, or lower WithAutomaticExtensionThreshold", ttl, cfg.extensionThreshold)
	}
	// An extension may wait a whole node timeout for its quorum.
	if err := checkAck(r.nodes, cfg); err != nil {
		return err
	}
	if cfg.extensionThreshold < cfg.nodeTimeout {
		return invalid("automatic extension threshold %v is below the node timeout %v: the lock could expire while an "+
			"extension waits for its quorum; raise WithAutomaticExtensionThreshold or lower WithNodeTimeout", cfg.extensionThreshold, cfg.nodeTimeout)
	}

	lock, err := r.acquire(ctx, cfg, resources, ttl)
	if err != nil {
		return err
	}
	ran = true

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fnCtx := withHeld(cctx, lock)
	ext := &extender{cfg: cfg, ttl: ttl, lock: lock, cancel: cancel, stop: make(chan struct{}), exited: make(chan struct{})}
	go ext.run(ctx)

	// Whatever way fn ends, the extender stops before the release, and the
	// release uses the newest Lock it made.
	defer func() {
		p := recover()
		close(ext.stop)
		<-ext.exited
		// With ctx ended, Release makes one attempt bounded by the node
		// timeout rather than a whole retry window.
		_, relErr := ext.lock.Release(ctx)
		if ext.err != nil && errors.Is(relErr, ErrLockExpired) {
			relErr = nil // the lock was lost, as ext.err already says
		}
		if p != nil {
			panic(p)
		}
		if err == nil || !errors.Is(err, ext.err) {
			// fn's error, when it already carries the loss (it returned
			// context.Cause(ctx), as it should, or wrapped it), is kept as
			// it is: the loss is said once.
			err = join(err, ext.err)
		}
		err = join(err, relErr)
	}()
	return fn(fnCtx)
}

// join returns the non-nil errors joined, or the only one unchanged.
func join(errs ...error) error {
	var first error
	n := 0
	for _, e := range errs {
		if e != nil {
			if n == 0 {
				first = e
			}
			n++
		}
	}
	if n <= 1 {
		return first
	}
	return errors.Join(errs...)
}

// heldKey is the context key of the lock that Using gives fn (held).
type heldKey struct{}

// held is what fn's context says of its lock: its token and its value.
type held struct {
	token uint64
	value string
}

// TokenFrom returns the fencing token of the lock that a fenced
// [Redlock.Using] runs fn under, from fn's context (or one derived from
// it), and true; from a [Term]'s context (and [Election.Lead]'s fn's), the
// term's number. It returns 0 and false for any other context, a non-fenced
// Using's among them. See [WithFencing].
func TokenFrom(ctx context.Context) (uint64, bool) {
	if ctx == nil {
		return 0, false
	}
	h, ok := ctx.Value(heldKey{}).(held)
	return h.token, ok && h.token != 0
}

// ValueFrom returns the value of the lock that [Redlock.Using] runs fn
// under ([Lock.Value]: what [Redlock.Inspect] shows and
// [Redlock.ForceRelease] takes), from fn's context (or one derived from
// it), and true; from a [Term]'s context, its term's lock value. It
// returns "" and false for any other context.
func ValueFrom(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	h, ok := ctx.Value(heldKey{}).(held)
	return h.value, ok && h.value != ""
}

// withHeld returns ctx carrying lock's token and value, in place of any
// that ctx carries already (a Using around it, for other resources), so
// that TokenFrom and ValueFrom never hand fn another lock's.
func withHeld(ctx context.Context, lock *Lock) context.Context {
	return context.WithValue(ctx, heldKey{}, held{lock.token, lock.value})
}
