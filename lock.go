package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/wake"
)

// Lock is a lock held on a quorum of nodes, as returned by Acquire and
// Extend. Its fields are fixed when it is made: Extend returns a new Lock
// (a new handle of the same lock) and spends this one for extending, so that
// no two goroutines ever see a Lock change under them. Release through any
// handle of a lock releases it, its newest extension included, and spends
// every handle: so `defer lock.Release(ctx)` right after Acquire works
// however often the lock is extended. A Lock is safe for concurrent use; a
// nil or zero *Lock is safe to Extend or Release (both return an error
// matching ErrInvalidArgument).
type Lock struct {
	redlock    *Redlock
	cfg        *config // the options it was acquired with
	resources  []string
	value      string
	token      uint64 // the fencing token; 0 when not fenced
	kind       kind   // its primitive (kind.go), with what it keeps of its grant
	expiration time.Time
	attempts   []ExecutionStats
	life       *lockLife // shared by every handle of the lock
	// extending is set while an Extend of this handle runs, and stays set
	// once one succeeded (extended): a handle is extended at most once.
	extending atomic.Bool
	extended  atomic.Bool
	// cut is set (Unix ns) when an Extend of this handle failed after
	// sending: its shorter ttl may have landed on some nodes, so the
	// handle is held no longer than that ttl allows.
	cut atomic.Int64
}

// grant runs p, an acquire's plan of kind k, and makes the Lock it wins.
func (r *Redlock) grant(ctx context.Context, cfg *config, k kind, p *plan) (*Lock, error) {
	p.acked = cfg.ack != nil
	start := time.Now()
	o := r.execute(ctx, cfg, p)
	if o.err != nil {
		cfg.done(ctx, OpAcquire, append([]string(nil), p.res...), start, &o, 0, o.err)
		return nil, o.err
	}
	cfg.done(ctx, OpAcquire, append([]string(nil), p.res...), start, &o, o.token, nil)
	l := &Lock{
		redlock:   r,
		cfg:       cfg,
		resources: p.res,
		value:     o.value,
		token:     o.token,
		kind:      k.won(p, &o),
		attempts:  o.attempts,
		life:      &lockLife{},
	}
	if h := o.handed; h != nil {
		// Handed over: the releasing holder's expiration, and its chain.
		l.expiration, l.life.granted = h.until, time.Now()
		l.life.chain, l.life.since = h.chain, h.since
	} else {
		l.expiration = o.win.Start.Add(p.ttl - drift(cfg.driftFactor, p.ttl))
		l.life.granted, l.life.since = o.win.Start, o.win.Start
	}
	l.life.until.Store(l.expiration.UnixNano())
	l.life.last.Store(l.expiration.UnixNano())
	l.life.lastTTL.Store(int64(p.ttl))
	r.hold(l)
	return l, nil
}

// released ends a release that succeeded (or handed the lock over).
func (r *Redlock) released(lock *Lock, cfg *config, res *ExecutionResult) *ExecutionResult {
	lock.life.released.Store(true)
	if obs := cfg.observer; obs != nil && obs.Released != nil {
		safely(obs.Released, ReleasedInfo{Resources: lock.Resources(), Held: time.Since(lock.life.granted)})
	}
	return res
}

// until is the handle's expiration, cut short by a failed Extend.
func (l *Lock) until() time.Time {
	if c := l.cut.Load(); c != 0 && c < l.expiration.UnixNano() {
		return time.Unix(0, c)
	}
	return l.expiration
}

// lockLife is what every handle of one lock (Acquire's and its extensions')
// shares.
type lockLife struct {
	// releasing is set once a release has been sent: from then on the lock
	// may be gone from a quorum, even if the release failed, so no handle
	// is Valid or can be extended.
	releasing atomic.Bool
	// released is set once a release succeeded or found the lock gone.
	released atomic.Bool
	// until is the newest handle's expiration, in Unix nanoseconds: what a
	// release through an older handle counts from.
	until atomic.Int64
	// granted is when the lock was acquired (the successful attempt's
	// start, or its hand-over), for the observer's hold time. Set before
	// the Lock is shared.
	granted time.Time
	// chain is how many hand-overs in a row gave this holder the lock
	// (0: granted by the nodes), and since when the nodes granted it. Set
	// before the Lock is shared.
	chain int
	since time.Time
	// mu orders the start of a release with the extensions in flight
	// (extends), so that a lock is never handed over while an extension
	// that may shorten it is out.
	mu      sync.Mutex
	extends int
	handed  bool // a Release handed it over, under mu
	// cut is the earliest cut of any handle (see Lock.cut), in Unix ns; 0
	// when none.
	cut atomic.Int64
	// last is the expiration of the newest grant or extension, in Unix ns:
	// unlike until, earlier after an extension to a shorter ttl; lastTTL
	// is its ttl.
	last, lastTTL atomic.Int64
	// lost is set once the observer was told that the lock was lost: it
	// is told once, whoever learns it (Extend, Using).
	lost atomic.Bool
	// gone is set once an Extend found the lock gone from a quorum (or
	// its validity over): no later Extend of any handle is sent, since
	// one could restore its keys where nodes lost them (a tombstone of
	// ForceRelease included) and bring back a lock that was lost.
	gone atomic.Bool
	// lost marks the nodes whose keys an extension wrote back, until an
	// extension wins without them (see extension); made by lostNodes.
	lostOn []atomic.Bool
	// Under mu: holder is the lock's place among the Waker's holders (see
	// hold); forcedErr and lostCh, the force release heard.
	holder    *wake.Holder
	forcedErr *ExecutionError
	lostCh    chan struct{}
}

// reportLost tells cfg's observer, once per lock, that it was lost.
func (lf *lockLife) reportLost(ctx context.Context, cfg *config, resources []string, err error) {
	obs := cfg.observer
	if obs == nil || obs.Lost == nil || lf.lost.Swap(true) {
		return
	}
	safely(obs.Lost, LostInfo{Ctx: ctx, Resources: append([]string(nil), resources...), Held: time.Since(lf.granted), Err: err})
}

// expiry is the lock's expiration as its holder knows it: the newest
// handle's, or earlier when an Extend that failed may have shortened it.
func (lf *lockLife) expiry() time.Time {
	u := min(lf.until.Load(), lf.last.Load())
	if c := lf.cut.Load(); c != 0 && c < u {
		u = c
	}
	return time.Unix(0, u)
}

// beginExtend counts an extension in flight, unless a release started.
func (lf *lockLife) beginExtend() bool {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.releasing.Load() {
		return false
	}
	lf.extends++
	return true
}

// endExtend settles an extension that beginExtend counted; cut, when not
// zero, is how far it may have shortened the lock (it failed). A won
// extension (cut zero) wrote its ttl on a quorum after any failed one's:
// the lock's expiration is its own again.
func (lf *lockLife) endExtend(cut int64) {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	lf.extends--
	if cut == 0 {
		lf.cut.Store(0)
		return
	}
	if c := lf.cut.Load(); c == 0 || cut < c {
		lf.cut.Store(cut)
	}
}

// extendedTo records a new handle's expiration.
func (lf *lockLife) extendedTo(t time.Time) {
	for {
		old := lf.until.Load()
		if t.UnixNano() <= old || lf.until.CompareAndSwap(old, t.UnixNano()) {
			return
		}
	}
}

// Resources returns a copy of the locked resources, in the order given.
func (l *Lock) Resources() []string {
	if l == nil {
		return nil
	}
	return append([]string(nil), l.resources...)
}

// Value returns the lock's value (32 random hex characters, then "@" and
// its escaped identity, see [WithIdentity] and [IdentityOf]), which every
// node stores under each resource. For a lock of the fair queue
// ([WithFairQueue]), a node that handed a resource to the waiter stores the
// waiter's id there instead (Value itself when the lock came by the
// hand-overs alone); its Extend and Release accept that too.
func (l *Lock) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Token returns the lock's fencing token, a number greater than the token
// of every fenced lock on any of the same resources granted before it
// ([WithFencing]); 0 for a lock acquired without fencing. Every handle of a
// lock has the same token. Pass it to the resource the lock protects, which
// refuses a write whose token is below the highest it has seen (in SQL,
// `WHERE fence < $token`, as the README's example does).
func (l *Lock) Token() uint64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Expiration returns the time until which the lock is held: the start of
// the successful attempt + ttl - drift, or earlier after an Extend of this
// handle to a shorter ttl failed (its new ttl may have reached some nodes). It returns the zero time once this
// handle has been extended, or a release of the lock has been attempted.
func (l *Lock) Expiration() time.Time {
	if !l.live() {
		return time.Time{}
	}
	return l.until()
}

// Valid reports whether the lock is still held by this handle's account:
// the handle not extended (the new handle is the valid one), no release of
// the lock attempted through any handle (even one that failed: its deletes
// may have landed), and its expiration not yet reached. It asks no node.
func (l *Lock) Valid() bool {
	return l.live() && time.Now().Before(l.until())
}

// live reports whether the handle is neither extended nor released.
func (l *Lock) live() bool {
	return l != nil && l.life != nil && !l.extended.Load() && !l.life.releasing.Load() && !l.life.gone.Load()
}

// Attempts returns a copy of the statistics of the attempts that produced
// this lock (only the last one when retries were unlimited).
func (l *Lock) Attempts() []ExecutionStats {
	if l == nil {
		return nil
	}
	return append([]ExecutionStats(nil), l.attempts...)
}

// Extend is shorthand for l's Redlock's [Redlock.Extend](ctx, l, ttl, opts...).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lock, error) {
	if l == nil {
		return nil, invalid("nil lock")
	}
	if l.redlock == nil {
		return nil, invalid("zero Lock: locks come from Acquire or Extend")
	}
	return l.redlock.Extend(ctx, l, ttl, opts...)
}

// Release is shorthand for l's Redlock's [Redlock.Release](ctx, l, opts...).
func (l *Lock) Release(ctx context.Context, opts ...ReleaseOption) (*ExecutionResult, error) {
	if l == nil {
		return nil, invalid("nil lock")
	}
	if l.redlock == nil {
		return nil, invalid("zero Lock: locks come from Acquire or Extend")
	}
	return l.redlock.Release(ctx, l, opts...)
}

// extendPlan is the plan that extends l by ttl.
func (l *Lock) extendPlan(ttl time.Duration) *plan { return l.kind.extend(l, ttl) }

// releasePlan is the plan that releases l, counting until as its
// expiration.
func (l *Lock) releasePlan(until time.Time) *plan { return l.kind.release(l, until) }
