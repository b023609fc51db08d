package redlock

import (
	"context"
	"errors"
	"strings"
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
// options. A failed extension is retried while the lock is still valid,
// never after.
//
// When the lock cannot be extended (taken over, a quorum of nodes gone, its
// validity over), fn's context is cancelled at once with a cause
// ([context.Cause]) that matches [ErrExtensionFailed] and wraps the extension
// error, and Using returns an error matching ErrExtensionFailed even if fn
// returned nil: the critical section was not protected to the end. fn should
// watch ctx.Done() and stop acting on the protected resource when it fires.
//
// When ctx ends, fn's context ends too; the lock is kept until fn returns, and
// then released. When fn returns, no new extension starts, an extension in
// flight is waited for, and the lock is released once (even if ctx has
// ended: then with one attempt, bounded by the node timeout; see Release)
// ended). Using returns fn's error; a release error is joined to it, never put
// in its place. If fn panics, the lock is released and the panic goes on.
// Using's goroutine has exited by the time it returns.
//
// Using returns an error matching [ErrInvalidArgument], before anything is
// acquired, for a nil fn, a ttl less than the threshold + 100ms, a threshold
// below the node timeout, and anything Acquire refuses.
func (r *Redlock) Using(ctx context.Context, resources []string, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if err := r.ready(ctx); err != nil {
		return err
	}
	ran := false
	if oc, _ := r.observing(nil, opts); oc.observer != nil && oc.observer.Using != nil {
		hook, start := oc.observer.Using, time.Now()
		defer func() { // after the release, below
			safely(hook, UsingInfo{Ctx: ctx, Resources: append([]string(nil), resources...), Start: start, Took: time.Since(start),
				Err: err, Ran: ran, Lost: errors.Is(err, ErrExtensionFailed)})
		}()
	}
	cfg, err := r.cfg.with(opts)
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
	fnCtx := withToken(cctx, lock.token)
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

// extender keeps one Using's lock alive. Its fields other than stop are
// written by its goroutine only, and read by Using after exited is closed.
type extender struct {
	cfg    *config
	ttl    time.Duration
	lock   *Lock // the newest Lock
	err    error // set when an extension failed: matches ErrExtensionFailed
	cancel context.CancelCauseFunc
	stop   chan struct{} // closed when fn has returned
	// abort cuts short an extension in flight when stop is closed (a
	// term's, whose release follows at once); Using waits for it.
	abort  bool
	exited chan struct{} // closed when run has returned
}

// run extends the lock shortly before each expiration until stop is closed
// or an extension fails.
func (e *extender) run(ctx context.Context) {
	defer close(e.exited)
	// Extensions outlive the caller's ctx (fn may still be in the critical
	// section after ctx ends) but never the lock's validity.
	base := context.WithoutCancel(ctx)
	if e.abort {
		var cancel context.CancelFunc
		base, cancel = context.WithCancel(base)
		defer cancel()
		go func() {
			select {
			case <-e.stop:
				cancel()
			case <-base.Done():
			}
		}()
	}
	for {
		if !e.wait(time.Until(e.lock.until()) - e.cfg.extensionThreshold) {
			return
		}
		for {
			extCtx, cancel := context.WithDeadline(base, e.lock.until())
			l, err := e.lock.Extend(extCtx, e.ttl) // the Lock carries Using's options
			cancel()
			if err == nil {
				e.lock = l
				break
			}
			// Lost for good, or out of time: tell fn at once.
			if errors.Is(err, ErrLockExpired) || !e.lock.Valid() {
				e.err = &extensionError{err: err, term: e.abort}
				e.cancel(e.err)
				e.lock.life.reportLost(ctx, e.cfg, e.lock.resources, err) // once: Extend may have told it
				return
			}
			// Node failures used up a retry window, but the lock is still
			// valid: try again after a retry delay, unless fn is done. The
			// delay ends at the lock's validity at the latest, when the
			// next Extend finds it expired and fn is told at once (not a
			// retry delay after the validity, while another may hold it).
			if !e.wait(min(retryDelay(e.cfg), time.Until(e.lock.until()))) {
				return
			}
		}
	}
}

// wait sleeps for d and reports whether it did, or returns false at once when
// stop is closed. It never starts an extension after fn has returned: stop is
// checked again after the timer, because select picks at random when both are
// ready.
func (e *extender) wait(d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-e.stop:
			return false
		case <-t.C:
		}
	}
	select {
	case <-e.stop:
		return false
	default:
		return true
	}
}

// extensionError is the cause with which Using cancels fn's context when an
// extension failed (and a term's, when it is lost): it matches
// ErrExtensionFailed and the Extend error.
type extensionError struct {
	err  error
	term bool
}

func (e *extensionError) Error() string {
	what := "the lock was lost while fn ran"
	if e.term {
		what = "the term was lost"
	}
	return "redlock: " + what + ": " + strings.TrimPrefix(e.err.Error(), "redlock: ")
}

func (e *extensionError) Unwrap() []error { return []error{ErrExtensionFailed, e.err} }

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
