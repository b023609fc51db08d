package redlock

import (
	"context"
	"errors"
	"time"
)

// Using runs fn while holding a lock on resources, and keeps the lock for as
// long as fn runs by extending it. It is node-redlock's using, with the
// lock-lost signal carried by fn's context.
//
// Using acquires the lock with opts; if that fails, fn never runs and the
// acquire error is returned unchanged. While fn runs, the lock is extended by
// ttl whenever its expiration is less than the automatic extension threshold
// away ([WithAutomaticExtensionThreshold], default 500ms), with the same
// options. A failed extension is retried until the lock's cancel point,
// never after.
//
// When the lock cannot be extended, fn's context is cancelled with a cause
// ([context.Cause]) that matches [ErrExtensionFailed] and wraps why: at
// once when an extension finds the lock taken over or gone. Otherwise (a
// quorum of nodes unreachable or slow) it is cancelled at the cancel point,
// if no extension got through by then: a quarter of the threshold before
// the end of the lock's validity, 100ms at most (100ms with the default
// threshold). The margin is for late timers, so that fn sees its context
// end before the validity does: on a 2-core machine the delay from a
// timer's time to a goroutine that sees the context end was at most 10ms
// (p99 1.5ms) with a few test processes running, and at most 14-89ms (p99
// 4-6ms) beside two busy loops as well. A process starved of CPU for longer than the margin
// sees it late, as any process paused past its validity: fence the writes
// ([WithFencing]). An extension that got through before the cancel point
// was acted on keeps the lock and moves the cancel point: fn's context
// never ends while the lock is extended. Using then returns an error
// matching ErrExtensionFailed even if fn returned nil: the critical section
// was not protected to the end. fn should watch ctx.Done() and stop acting
// on the protected resource when it fires. A force release of the lock
// ([Redlock.ForceRelease]) ends fn's context as soon as its announcement
// arrives (milliseconds); a lock lost otherwise (its keys gone from a
// quorum, taken by another after it expired), or a force release whose
// announcement was lost, is noticed at the next extension, at most
// ttl − threshold after the loss.
//
// When ctx ends, fn's context ends too; the lock is kept until fn returns, and
// then released. When fn returns, no new extension starts, an extension in
// flight is waited for, and the lock is released once (even if ctx has
// ended: then with one attempt, bounded by the node timeout; see
// [Redlock.Release]).
// Using returns fn's error; a release error is joined to it, never put
// in its place. If fn panics, the lock is released and the panic goes on.
// Using's goroutines have exited by the time it returns.
//
// Using returns an error matching [ErrInvalidArgument], before anything is
// acquired, for a nil fn, a ttl less than the threshold + 100ms, a threshold
// below the node timeout, and anything Acquire refuses; and one matching
// [ErrClosed], sending nothing, once the Redlock is closed.
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
