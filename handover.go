package redlock

import (
	"context"
	"time"
)

// Hand-over in one process (WithHandOver): a Release while an Acquire of
// the same Redlock waits for the same resources, with the same options,
// passes the lock to it instead of deleting it. Nothing is sent: the nodes
// keep the lock's value, which becomes the waiter's, and the waiter's Lock
// expires when the releasing holder's would have. So mutual exclusion is
// the Redlock argument unchanged (the nodes hold one value, which one holder
// at a time believes its own), and validity is the releasing holder's (never
// longer than every node of its quorum keeps the keys). A fenced lock draws
// a new token before the waiter runs: the token + 1, written to a quorum of
// nodes that still hold the value (script.WriteBack), one round trip.
//
// A chain of hand-overs is bounded (WithHandOver's max and window, counted
// from the last grant by the nodes), after which the lock is released for
// real, so that other processes' waiters get their turn; so is a lock with
// less than half its ttl left, or with an extension in flight.

// WithHandOver sets how a Release hands the lock to an Acquire of the same
// Redlock that waits for it (same resources, ttl and options) instead of
// releasing it: nothing is sent, and the waiter gets the lock at once, valid
// as long as the releaser's was. It releases for real after max hand-overs
// in a row or window since the nodes granted it, with less than half the
// ttl left, or with no such waiter. max 0 turns it off (at most 2^20;
// window positive). It is refused with [WithPermits], [WithShared],
// [WithFairQueue] or WithWakeOnRelease(false). Default: 16 within 100ms.
func WithHandOver(max int, window time.Duration) HandOverOption {
	return func(c *config) { c.handOver, c.handOverWindow, c.given = max, window, c.given|givenHandOver }
}

// tagOf returns the hand-over tag of a lock of kind k and ttl under cfg,
// or the zero tag (ttl 0) when it is not handed over.
func tagOf(cfg *config, k kind, ttl time.Duration) handTag {
	if cfg.handOver == 0 || !cfg.wake || !k.handsOver() {
		return handTag{}
	}
	t := handTag{ttl: ttl, token: cfg.fencing}
	if cfg.ack != nil {
		t.ack, t.acked = *cfg.ack, true
	}
	return t
}

// tag is the plan's hand-over tag as the waiters hold it: nil when it
// takes no hand-over. (Made when the call waits: an uncontended call
// allocates nothing for it.)
func (p *plan) tag() any {
	if p.handTag.ttl == 0 {
		return nil
	}
	return p.handTag
}

// handOver passes lock to a waiter of r when cfg (the release's options)
// allows it, the lock has at least half its ttl left, and its chain is
// within bounds. It is called with the release started, once no extension
// is in flight and no earlier release was sent (beginRelease), and reports
// whether the lock was handed over; then lock is released as far as its
// holder is concerned.
func (r *Redlock) handOver(lock *Lock, cfg *config) bool {
	life := lock.life
	ttl := time.Duration(life.lastTTL.Load()) // the newest handle's, whichever releases
	if cfg.handOver == 0 || !lock.kind.handsOver() || ttl == 0 {
		return false
	}
	if r.wake.Idle() {
		return false // no one waits: the common release pays nothing more
	}
	tag := tagOf(lock.cfg, lock.kind, ttl)
	if tag.ttl == 0 {
		return false
	}
	now := time.Now()
	until := life.expiry()
	if until.Sub(now) < ttl/2 || life.chain >= cfg.handOver || now.Sub(life.since) >= cfg.handOverWindow {
		return false
	}
	off := &handOff{value: lock.value, token: lock.token, until: until, chain: life.chain + 1, since: life.since}
	return r.wake.HandOver(lock.resources, tag, off)
}

// takeOver makes the waiter's outcome from a hand-over: for a fenced lock,
// after its new token reached a quorum. It reports false when the lock
// could not be taken (less than half its ttl left, or its token not written
// in time), after passing it on or releasing it.
func (c *run) takeOver(p *plan, off *handOff) bool {
	if time.Until(off.until) < p.ttl/2 {
		// The releaser or this waiter was paused since the offer: too
		// little is left to begin with.
		c.r.disown(c.ctx, c.cfg, p, off)
		return false
	}
	if !p.hook().adoptHanded(c, p, off) { // a fenced lock's new token
		return false
	}
	c.o.value, c.o.token, c.o.handed = off.value, off.token, off
	return true
}

// disown deals with a hand-over that its waiter cannot take (it gave up,
// or its token was not written): it goes to another waiter, or is released.
func (r *Redlock) disown(ctx context.Context, cfg *config, p *plan, off *handOff) {
	if time.Until(off.until) >= p.ttl/2 && r.wake.HandOver(p.res, p.tag(), off) {
		return
	}
	one := *cfg
	one.retryCount = 0
	rp := newReleasePlan(p.res, off.value, off.until)
	rp.acked = p.acked
	r.execute(context.WithoutCancel(ctx), &one, rp)
	rp.free()
}

// handedOver reports whether a holder handed the call its lock, and the
// call took it (see handover.go).
func (c *run) handedOver(p *plan) bool {
	off, _ := c.r.wake.Take(c.wt).(*handOff)
	if off == nil {
		return false
	}
	if !c.takeOver(p, off) {
		// The hand-over took it out of the queue: it waits again, at the
		// back of the queue.
		c.r.wake.Leave(c.wt, false)
		c.wt = c.r.wake.Join(p.res, false, p.tag(), p.waiterID(), maxDelay(c.cfg))
		return false
	}
	c.o.tries = c.tries
	return true
}

// startRelease marks lock's release started, and hands the lock over when
// it may (see handOver): with no extension in flight, and no release sent
// before (its deletes may still land). before reports that another Release
// of the lock handed it over already: this one must send nothing, as the
// value is the new holder's.
func (r *Redlock) startRelease(lock *Lock, cfg *config) (handed, before bool) {
	lf := lock.life
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.handed {
		return false, true
	}
	again := lf.releasing.Swap(true)
	if !again && lf.holder != nil {
		r.wake.Unhold(lf.holder)
	}
	if lf.extends > 0 || again || lf.released.Load() || lf.gone.Load() || !r.handOver(lock, cfg) {
		return false, false
	}
	lf.handed = true
	return true, false
}
