package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	ext := &extender{cfg: cfg, ttl: ttl, lock: lock, cancel: cancel}
	ext.start(ctx)

	// Whatever way fn ends, the extender stops before the release, and the
	// release uses the newest Lock it made.
	defer func() {
		p := recover()
		newest, lost := ext.halt()
		// With ctx ended, Release makes one attempt bounded by the node
		// timeout rather than a whole retry window.
		_, relErr := newest.Release(ctx)
		if lost != nil && errors.Is(relErr, ErrLockExpired) {
			relErr = nil // the lock was lost, as lost already says
		}
		if p != nil {
			panic(p)
		}
		if err == nil || !errors.Is(err, lost) {
			// fn's error, when it already carries the loss (it returned
			// context.Cause(ctx), as it should, or wrapped it), is kept as
			// it is: the loss is said once.
			err = join(err, lost)
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

// extender keeps one Using's lock (or a term's) alive. It has no goroutine
// of its own: a timer starts each extension when it is due (in the
// timer's goroutine, for as long as the extension takes), another ends
// fn's context at the cancel point, and a force release heard calls it
// back. Its fields are guarded by mu; halt returns the newest Lock and the loss.
type extender struct {
	cfg *config
	ttl time.Duration
	// ctx is the caller's, for the observer: kept, since no goroutine
	// of the extender's is left to be handed it.
	ctx  context.Context
	base context.Context // extensions outlive ctx (fn may still run), never the validity
	// abort cuts short an extension in flight when fn has returned (a
	// term's, whose release follows at once); halt does not wait for it.
	abort bool

	mu     sync.Mutex
	lock   *Lock // the newest Lock
	err    error // set when the lock was lost: matches ErrExtensionFailed
	cancel context.CancelCauseFunc
	last   error // the newest failed extension's error, since the last success
	// next fires when the next extension (or a retry) is due; end at the
	// cancel point of the newest Lock (its validity's end less margin).
	next, end *time.Timer
	// flight is set while an extension is on its way: xcancel cuts it
	// short, and landed is done when it has returned.
	flight  bool
	xcancel context.CancelFunc
	landed  sync.WaitGroup
	halted  bool // fn has returned
	over    bool // halted, or lost: nothing more starts
	unwatch func()
}

// start arms the extender's timers: the first extension when it is due,
// and the cancel point; and listens for a force release.
func (e *extender) start(ctx context.Context) {
	e.ctx, e.base = ctx, context.WithoutCancel(ctx)
	life := e.lock.life // every handle of the lock shares it
	e.mu.Lock()
	e.end = time.AfterFunc(time.Until(e.cancelPoint()), e.atCancelPoint)
	e.next = time.AfterFunc(time.Until(e.lock.until())-e.cfg.extensionThreshold, e.due)
	e.mu.Unlock()
	unwatch := life.whenLost(e.lost) // may call it at once
	e.mu.Lock()
	e.unwatch = unwatch
	e.mu.Unlock()
}

// halt stops the extender once fn has returned and returns the newest Lock
// and whether it was lost: no extension starts from now on. For Using, one
// on its way is waited for (cut short at the cancel point). A term's is cut
// short and not waited for: its release follows at once, and the term may
// be resigned by a hook of that very extension's (the observer's).
func (e *extender) halt() (*Lock, error) {
	e.mu.Lock()
	e.halted, e.over = true, true
	e.next.Stop()
	wait := e.flight
	if e.flight && e.abort {
		e.xcancel()
		wait = false
	}
	if !e.flight {
		e.end.Stop()
	}
	unwatch := e.unwatch
	e.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	if wait {
		e.landed.Wait() // no extension starts after halt (over): landed is not reused
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lock, e.err
}

// due starts an extension of the newest Lock and acts on its outcome: on
// success the timers are set for the new validity; a lock lost for good,
// or out of time, ends fn's context; node failures that used up a retry
// window while the lock is still valid try again after a retry delay (the
// cancel point ends fn's context first if nothing gets through by then).
// Once fn has returned, only a lock found gone counts as lost: fn ran while
// it was valid, and the release tells what is left.
func (e *extender) due() {
	e.mu.Lock()
	if e.over || e.flight {
		e.mu.Unlock()
		return
	}
	if !time.Now().Before(e.cancelPoint()) { // a term begun late, a timer that fired late
		report := e.lose(e.unextended(e.last, false))
		e.mu.Unlock()
		report()
		return
	}
	lock := e.lock
	// No deadline of its own (a timer per extension): the cancel point,
	// which comes before the validity's end, cuts it short (atCancelPoint),
	// as a force release heard does and, for a term, fn's return (halt).
	xctx, cancel := context.WithCancel(e.base)
	e.landed.Add(1)
	e.flight, e.xcancel = true, cancel
	e.mu.Unlock()

	l, err := lock.Extend(xctx, e.ttl) // the Lock carries Using's options
	cancel()

	report := func() {}
	e.mu.Lock()
	defer func() {
		e.flight, e.xcancel = false, nil
		if e.halted {
			e.end.Stop()
		}
		e.landed.Done()
		e.mu.Unlock()
		report()
	}()
	switch {
	case e.err != nil: // lost meanwhile: at the cancel point, or force-released
		if err == nil {
			e.lock = l // too late for fn; the release goes through the newest handle
		}
	case err == nil:
		e.lock, e.last = l, nil
		if !e.over {
			e.end.Reset(time.Until(e.cancelPoint()))
			e.next.Reset(time.Until(l.until()) - e.cfg.extensionThreshold)
		}
	case errors.Is(err, ErrLockExpired):
		// Lost for good: fn is told at once, and Using's error says so
		// even when fn has returned meanwhile.
		report = e.lose(err)
	case e.halted:
	case !lock.Valid():
		report = e.lose(err) // out of time
	default:
		e.last = err
		e.next.Reset(retryDelay(e.cfg))
	}
}

// atCancelPoint ends fn's context when no extension got through by the
// cancel point of the newest Lock (a timer of an older one is ignored),
// and cuts short an extension still on its way (one that outlived fn
// too, with no loss: fn ran while the lock was valid).
func (e *extender) atCancelPoint() {
	e.mu.Lock()
	switch {
	case e.halted:
		if e.flight {
			e.xcancel()
		}
		e.mu.Unlock()
		return
	case e.over || time.Now().Before(e.cancelPoint()):
		e.mu.Unlock()
		return
	}
	report := e.lose(e.unextended(e.last, e.flight))
	if e.flight {
		e.xcancel()
	}
	e.mu.Unlock()
	report()
}

// lost ends fn's context when the lock is lost (err): when a force release
// of it is heard, not when the next extension fails; or when an extension
// found it gone from a quorum, before that extension releases it. It cuts
// short an extension on its way.
func (e *extender) lost(err error) {
	e.mu.Lock()
	if e.over {
		e.mu.Unlock()
		return
	}
	report := e.lose(err)
	if e.flight {
		e.xcancel()
	}
	e.mu.Unlock()
	report()
}

// cancelPoint is when fn's context ends unless the lock is extended first.
func (e *extender) cancelPoint() time.Time { return e.lock.until().Add(-margin(e.cfg)) }

// lose ends fn's context with err as the cause (wrapped: it matches
// ErrExtensionFailed) and stops the timers. Called with mu held; the caller
// calls report once it has let go of mu: it tells the observer (whose
// hook may call Resign, which halts the extender).
func (e *extender) lose(err error) (report func()) {
	e.over = true
	e.next.Stop()
	e.end.Stop()
	e.err = &extensionError{err: err, term: e.abort}
	e.cancel(e.err)
	lock := e.lock
	return func() { lock.life.reportLost(e.ctx, e.cfg, lock.resources, err) } // once: Extend may have told it
}

// unextended is the error of a lock not extended by its cancel point.
func (e *extender) unextended(last error, inFlight bool) error {
	return &unextendedError{resources: e.lock.resources, margin: margin(e.cfg), last: last, inFlight: inFlight}
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
