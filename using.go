package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	if err := r.door(cfg, resources, true, ttl, &kept{"Using", "the lock could expire"}); err != nil {
		return err
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

// withHeld returns ctx carrying lock's token and value, in place of any
// that ctx carries already (a Using around it, for other resources), so
// that TokenFrom and ValueFrom never hand fn another lock's.
func withHeld(ctx context.Context, lock *Lock) context.Context {
	return context.WithValue(ctx, heldKey{}, held{lock.token, lock.value})
}

// The extender: what keeps a Using's lock (and a term's) alive while fn
// runs, and ends fn's context when the lock is lost or reaches its cancel
// point unextended.

// The cancel point of a lock is the end of its validity less a margin: a
// quarter of the extension threshold, maxMargin at most. When no extension
// got through by then, Using ends fn's context (and the election a term's).
// The margin is for late timers (the extender wakes, cancels, and fn's
// goroutine is scheduled), so that fn sees its context end inside the
// validity rather than after it; the quarter leaves an extension three
// quarters of the threshold to get through. Measured on a 2-core machine
// (BenchmarkCancelPointLateness: a timer that cancels a context, 16 at a
// time, and the delay until a goroutine waiting on Done runs): with other
// test processes running, p99 1.2-1.5ms, max 5.5-10ms; beside two busy
// loops as well, p99 4-6ms, max 14-89ms. The safety harness (TestSafety's
// elections, whose load is its own), at 100,000 sections with other suites
// beside it, saw a lost term's context end up to 56ms after a 20ms cancel
// point (5 of 230 after the validity's end), and up to 28ms after the 75ms
// one of its 300ms threshold (all 224 at least 46ms before the validity's
// end).
const maxMargin = 100 * time.Millisecond

// margin is the cancel point's distance from the end of the validity.
func margin(cfg *config) time.Duration { return min(maxMargin, cfg.extensionThreshold/4) }

// extender keeps one Using's lock alive. Its fields other than stop are
// written by its goroutine only, and read by Using after exited is closed.
type extender struct {
	cfg    *config
	ttl    time.Duration
	lock   *Lock // the newest Lock
	err    error // set when the lock was lost: matches ErrExtensionFailed
	cancel context.CancelCauseFunc
	stop   chan struct{} // closed when fn has returned
	// abort cuts short an extension in flight when stop is closed (a
	// term's, whose release follows at once); Using waits for it.
	abort  bool
	exited chan struct{} // closed when run has returned
	// end fires at the cancel point of the newest Lock (its validity's
	// end less margin); due is set when a wait saw it fire. Both belong
	// to run; end is nil outside it.
	end *time.Timer
	due bool
	// gone is closed when a force release of the lock is heard (see
	// lockLife.forced); forced is set when a wait saw it. Both belong to
	// run.
	gone   <-chan struct{}
	forced bool
}

// run extends the lock shortly before each expiration until stop is closed
// or the lock is lost. It ends fn's context at the cancel point of the
// newest Lock unless an extension got through by then: an extension in
// flight runs in a goroutine of its own, so that neither its own failure
// path nor a wait between two tries can delay fn's end past the validity.
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
	e.end = time.NewTimer(time.Until(e.cancelPoint()))
	defer e.end.Stop()
	e.gone = e.lock.life.lostC()
	var last error // the newest failed extension's error, since the last success
	for {
		if !e.wait(time.Until(e.lock.until()) - e.cfg.extensionThreshold) {
			e.lostAtEnd(ctx, last)
			return
		}
		for {
			l, err := e.extend(ctx, base, last)
			if e.err != nil { // lost at the cancel point while it was in flight
				return
			}
			if err == nil {
				e.lock, last = l, nil
				e.rearm()
				break
			}
			// Lost for good, or out of time: tell fn at once.
			if errors.Is(err, ErrLockExpired) || !e.lock.Valid() {
				e.lose(ctx, err)
				return
			}
			// Node failures used up a retry window, but the lock is still
			// valid: try again after a retry delay, unless fn is done. The
			// cancel point ends the wait (fn is told then, not a retry
			// delay after the validity, while another may hold it).
			last = err
			if !e.wait(retryDelay(e.cfg)) {
				e.lostAtEnd(ctx, last)
				return
			}
		}
	}
}

// cancelPoint is when fn's context ends unless the lock is extended first.
func (e *extender) cancelPoint() time.Time { return e.lock.until().Add(-margin(e.cfg)) }

// rearm sets end to the newest Lock's cancel point. A tick of the old one
// is drained first: with the timers of Go before 1.23 (a main module whose
// go line is older keeps them) a stale tick would end fn's context.
func (e *extender) rearm() {
	if !e.end.Stop() {
		select {
		case <-e.end.C:
		default:
		}
	}
	e.end.Reset(time.Until(e.cancelPoint()))
}

// extend runs one Extend of the newest Lock in a goroutine, and returns its
// outcome; or, when the cancel point comes first, ends fn's context at once
// (e.err is set), cuts the Extend short and waits for it.
func (e *extender) extend(ctx, base context.Context, last error) (*Lock, error) {
	select {
	case <-e.end.C: // already past it (a term begun late, a wait that returned with it ready)
		e.lose(ctx, e.unextended(last, false))
		return nil, e.err
	default:
	}
	xctx, cancel := context.WithDeadline(base, e.lock.until())
	defer cancel()
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := e.lock.Extend(xctx, e.ttl) // the Lock carries Using's options
		got <- result{l, err}
	}()
	select {
	case r := <-got:
		return r.l, r.err
	case <-e.end.C:
	case <-e.gone:
		// Force-released: fn is told now, not when the extension fails.
		e.lose(ctx, e.lock.life.forcedError())
		cancel()
		<-got
		return nil, e.err
	}
	// An extension that got through before the cancel point was acted on
	// keeps the lock: its new validity is ahead.
	select {
	case r := <-got:
		if r.err == nil {
			return r.l, nil
		}
		if errors.Is(r.err, ErrLockExpired) {
			e.lose(ctx, r.err)
		} else {
			e.lose(ctx, e.unextended(r.err, false))
		}
		return nil, e.err
	default:
	}
	e.lose(ctx, e.unextended(last, true))
	cancel()
	if r := <-got; r.err == nil {
		e.lock = r.l // too late for fn; the release goes through the newest handle
	}
	return nil, e.err
}

// lose ends fn's context with err as the cause (wrapped: it matches
// ErrExtensionFailed), and tells the observer.
func (e *extender) lose(ctx context.Context, err error) {
	e.err = &extensionError{err: err, term: e.abort}
	e.cancel(e.err)
	e.lock.life.reportLost(ctx, e.cfg, e.lock.resources, err) // once: Extend may have told it
}

// lostAtEnd loses the lock if a wait ended at the cancel point, or on a
// force release.
func (e *extender) lostAtEnd(ctx context.Context, last error) {
	switch {
	case e.forced:
		e.lose(ctx, e.lock.life.forcedError())
	case e.due:
		e.lose(ctx, e.unextended(last, false))
	}
}

// unextended is the error of a lock not extended by its cancel point.
func (e *extender) unextended(last error, inFlight bool) error {
	return &unextendedError{resources: e.lock.resources, margin: margin(e.cfg), last: last, inFlight: inFlight}
}

// wait sleeps for d and reports whether it did, or returns false at once when
// stop is closed, or at the cancel point (then with due set). It never
// starts an extension after fn has returned: stop is checked again after
// the timer, because select picks at random when both are ready.
func (e *extender) wait(d time.Duration) bool {
	var end <-chan time.Time // none outside run
	if e.end != nil {
		end = e.end.C
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-e.stop:
			return false
		case <-end:
			e.due = true
			return false
		case <-e.gone:
			e.forced = true
			return false
		case <-t.C:
		}
	}
	select {
	case <-e.stop:
		return false
	case <-e.gone:
		e.forced = true
		return false
	default:
		return true
	}
}

// unextendedError is why a lock was given up at its cancel point: no
// extension got through by margin before the end of its validity.
type unextendedError struct {
	resources []string
	margin    time.Duration
	last      error // the newest failed extension's error, if any
	inFlight  bool  // an extension was still on its way
}

func (e *unextendedError) Error() string {
	what := fmt.Sprintf("extend %q: ", e.resources)
	s := "redlock: " + what + fmt.Sprintf("not extended %v before the end of its validity", e.margin)
	last := ""
	if e.last != nil { // said once: "extend [...]" is in s already
		last = strings.TrimPrefix(strings.TrimPrefix(e.last.Error(), "redlock: "), what)
	}
	switch {
	case e.inFlight && last != "":
		return s + " (an extension was still on its way; the one before failed: " + last + ")"
	case e.inFlight:
		return s + " (an extension was still on its way)"
	case last != "":
		return s + ": " + last
	}
	return s
}

func (e *unextendedError) Unwrap() error { return e.last }

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
