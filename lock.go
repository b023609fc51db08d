package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/script"
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

// Acquire: its options become a kind in kind.go's kindFor, the one switch
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
	if err := r.door(cfg, resources, true, ttl, nil); err != nil {
		return refused(err)
	}
	return r.acquire(ctx, cfg, resources, ttl)
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

// acquire is Acquire after validation: the plan of cfg's kind.
func (r *Redlock) acquire(ctx context.Context, cfg *config, resources []string, ttl time.Duration) (*Lock, error) {
	keys := append([]string(nil), resources...) // the caller may reuse theirs
	k := kindFor(cfg)
	p := k.acquire(keys, ttl, cfg)
	p.handTag = tagOf(cfg, k, ttl)
	return r.grant(ctx, cfg, k, p)
}

// grant runs p, an acquire's plan of kind k, and makes the Lock it wins.
// p is given back at its end.
func (r *Redlock) grant(ctx context.Context, cfg *config, k kind, p *plan) (*Lock, error) {
	defer p.free()
	p.acked = cfg.ack != nil
	if cfg.wake {
		r.wake.Start() // dialled beside the attempt: confirmed by the grant (see hold)
	}
	start := time.Now()
	o := r.execute(ctx, cfg, p)
	if o.err != nil {
		if cfg.observesDone() {
			cfg.done(ctx, OpAcquire, append([]string(nil), p.res...), start, &o, 0, o.err)
		}
		return nil, o.err
	}
	if cfg.observesDone() { // the copy of the resources only for an observer
		cfg.done(ctx, OpAcquire, append([]string(nil), p.res...), start, &o, o.token, nil)
	}
	// The first handle and the life its handles share, made together.
	g := &struct {
		l    Lock
		life lockLife
	}{}
	l := &g.l
	*l = Lock{
		redlock:   r,
		cfg:       cfg,
		resources: p.res,
		value:     o.value,
		token:     o.token,
		kind:      k.won(p, o),
		attempts:  o.attempts,
		life:      &g.life,
	}
	if h := o.handed; h != nil {
		// Handed over: the releasing holder's expiration, and its chain.
		l.expiration, l.life.granted = h.until, time.Now()
		l.life.chain, l.life.since = h.chain, h.since
	} else {
		l.expiration = o.win.Start.Add(p.ttl - drift(cfg.driftFactor, p.ttl))
		l.life.granted, l.life.since = o.win.Start, o.win.Start
	}
	if o.win != nil && len(o.args) > 0 {
		if v, ok := o.args[0].(string); ok && v == o.value {
			l.life.args = o.args[:1:1] // its value, boxed by the attempt: the release's ARGV
		}
	}
	l.life.until.Store(l.expiration.UnixNano())
	l.life.last.Store(l.expiration.UnixNano())
	l.life.lastTTL.Store(int64(p.ttl))
	var granted []int
	if o.win != nil {
		granted = o.win.VotesFor
	}
	r.hold(ctx, l, granted)
	return l, nil
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
	if err := r.door(cfg, lock.resources, false, ttl, nil); err != nil {
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
	defer p.free()
	p.acked = lock.cfg.ack != nil
	p.abandon = &lock.life.releasing
	p.ext = r.newExtension(lock, cfg, p)
	// From the first PEXPIRE on, the keys may expire at now + ttl: before
	// this handle's expiration when ttl is shorter than what is left. The
	// handle is held no longer than that, whether the Extend succeeds or not.
	lock.cutTo(time.Now().Add(ttl - drift(cfg.driftFactor, ttl)).UnixNano())
	o := r.execute(ctx, cfg, p)
	if out != nil {
		*out = o
	}
	if o.err != nil {
		lock.life.endExtend(lock.cut.Load(), ttl)
		lock.extending.Store(false)
		expired := errors.Is(o.err, ErrLockExpired)
		if expired {
			// Gone from a quorum, or its validity over: the lock is lost
			// (before its drops: a late answer of an earlier Extend then
			// drops what it wrote), and its holder is told before the
			// drops go (a Using's fn, a term): they free nodes that may
			// still hold it, where another caller could take it.
			lock.life.gone.Store(true)
			lock.life.lostBy(o.err)
		}
		if o.tries > 0 {
			// What it wrote back goes; all of the lock when it is lost.
			p.ext.failedFor(r.size(), expired)
		}
		if expired {
			r.unhold(lock.life)
			lock.life.reportLost(ctx, cfg, lock.resources, o.err)
		}
		return nil, o.err
	}
	for i := range p.ext.lost {
		if p.ext.drops[i].Idle() && !p.ext.doubted[i].Load() { // a drop still out may land after any write
			p.ext.lost[i].Store(false) // a quorum held it without them: they hold it again
			p.ext.suspect[i].Store(false)
		}
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
	if c := lock.life.endExtend(0, ttl); c != 0 {
		nl.cut.Store(c) // a failed shorter Extend's writes may land after this one's
	}
	lock.life.extendedTo(nl.expiration)
	lock.life.last.Store(nl.expiration.UnixNano())
	lock.life.lastTTL.Store(int64(ttl))
	return nl, nil
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
	rp.free()
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

// released ends a release that succeeded (or handed the lock over).
func (r *Redlock) released(lock *Lock, cfg *config, res *ExecutionResult) *ExecutionResult {
	lock.life.released.Store(true)
	if obs := cfg.observer; obs != nil && obs.Released != nil {
		safely(obs.Released, ReleasedInfo{Resources: lock.Resources(), Held: time.Since(lock.life.granted)})
	}
	return res
}

// until is the handle's expiration, cut short by a failed Extend.
// cutTo lowers the handle's cut to c, never raises it: an Extend that
// fails after a shorter one keeps the shorter one's cap.
func (l *Lock) cutTo(c int64) {
	for {
		old := l.cut.Load()
		if old != 0 && old <= c || l.cut.CompareAndSwap(old, c) {
			return
		}
	}
}

func (l *Lock) until() time.Time {
	if c := l.cut.Load(); c != 0 && c < l.expiration.UnixNano() {
		return time.Unix(0, c)
	}
	return l.expiration
}

// live reports whether the handle is neither extended nor released.
func (l *Lock) live() bool {
	return l != nil && l.life != nil && !l.extended.Load() && !l.life.releasing.Load() && !l.life.gone.Load()
}

// extendPlan is the plan that extends l by ttl.
func (l *Lock) extendPlan(ttl time.Duration) *plan { return l.kind.extend(l, ttl) }

// releasePlan is the plan that releases l, counting until as its
// expiration.
func (l *Lock) releasePlan(until time.Time) *plan { return l.kind.release(l, until) }

// lockLife is what every handle of one lock (Acquire's and its extensions')
// shares.
type lockLife struct {
	// args is {value}, as the winning attempt boxed it, for the release's
	// ARGV (read only); nil when the lock was handed over.
	args []any
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
	// when none; cutTTL the shortest ttl of the failed Extends that set
	// it, under mu.
	cut    atomic.Int64
	cutTTL time.Duration
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
	// extension wins without them (see extension); made by newExtension.
	lostOn []atomic.Bool
	// drops counts, per node, the drops of the lock (extension.drop) not yet
	// answered: such a node stays lost, since its drop may land after a
	// later extension's write (made with lostOn). extSeq numbers the
	// Extend calls, under mu: only the newest drops anything.
	drops  []flight.Flight
	extSeq uint64
	// doubted marks the nodes to which a drop got no reply and was sent
	// again: its first copy may land at any time, so they stay lost for
	// the lock's life (made with lostOn).
	doubted []atomic.Bool
	// suspect marks the nodes lost only on suspicion (see failedFor):
	// never dropped while the lock may be held (made with lostOn).
	suspect []atomic.Bool
	// Under mu: holder is the lock's place among the Waker's holders (see
	// hold); forcedErr, the force release heard; lostErr, the first loss
	// (forcedErr, or an extension's: see lostBy); onLost, whenLost's hooks.
	holder    *wake.Holder
	forcedErr *ExecutionError
	lostErr   error
	onLost    []*lostHook
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

// endExtend settles an extension of ttl that beginExtend counted, and
// returns the cut that still applies to the lock (0: none). cut, when not
// zero, is how far it may have shortened the lock (it failed). A won
// extension (cut zero) makes the lock's expiration its own again, unless a
// failed one wrote a shorter ttl: its writes may land after the won one's
// (held up on the way) and expire the keys sooner, so its cut stays.
func (lf *lockLife) endExtend(cut int64, ttl time.Duration) int64 {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	lf.extends--
	if cut == 0 {
		if lf.cutTTL >= ttl {
			lf.cut.Store(0)
			lf.cutTTL = 0
		}
		return lf.cut.Load()
	}
	if c := lf.cut.Load(); c == 0 || cut < c {
		lf.cut.Store(cut)
	}
	if lf.cutTTL == 0 || ttl < lf.cutTTL {
		lf.cutTTL = ttl
	}
	return lf.cut.Load()
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

// Lost means lost: how a holder learns that its lock is gone, and why it
// never takes a lost lock back.
//
//   - An extension counts only the nodes that still held the lock. Where a
//     key was missing it writes it back (a rolling restart keeps the
//     lock's spread) but that node votes against; so does a node whose keys
//     an earlier attempt or failed extension of the lock wrote back, until
//     an extension wins without it.
//   - A failed extension leaves nothing it surely wrote back: that is
//     released, and when the lock is gone from a quorum, every node's copy
//     is, once its holder was told (Using's fn context, a term). A node
//     whose answer was lost is only suspect: it may hold the lock, so it
//     keeps its key while the lock may be held.
//   - No release of a failed extension undoes a later one: only the newest
//     Extend drops; a node stays lost while a drop to it is out (for the
//     lock's life if a copy of it went unanswered, as it may land any
//     time); and a failed Extend to a shorter ttl, whose writes may land
//     after a later one's, caps every later handle at its own expiry.
//   - A force release reaches its holder at once: every held lock listens
//     for the release announcements of its own value (the waiters'
//     subscriptions), and one that names it ends the lock.

// extension is one Extend call's record of the nodes that lost its lock.
type extension struct {
	lost    []atomic.Bool   // the lock's (lockLife.lostOn)
	drops   []flight.Flight // the lock's (lockLife.drops)
	doubted []atomic.Bool   // the lock's (lockLife.doubted)
	suspect []atomic.Bool   // the lock's (lockLife.suspect)
	life    *lockLife
	seq     uint64        // its number among the lock's Extend calls (lockLife.extSeq)
	unknown []atomic.Bool // the call's: sent, and no answer came in an attempt not won
	// restores: a node answered that it had lost the lock's keys in this
	// call; then a node whose answer was lost may have written them back
	// too, and counts as lost.
	restores atomic.Bool
	failed   atomic.Bool // the call failed: a write-back that lands later is undone
	expired  atomic.Bool // it failed for good: any write that lands later is undone
	// What drop needs, kept from the call (its plan goes back to the pool
	// when it returns, before its late answers).
	r    *Redlock
	lock *Lock
	cfg  *config
	u    undo
}

// judge turns node i's answer to the extension (rep, err) into its vote:
// a node that wrote keys back, or whose keys were written back since the
// lock last held a quorum without it, votes against; so does one whose
// earlier answer in the call was lost, when another node's showed that
// keys were lost (its call may have written them back). won: the attempt
// was decided for already, so a write-back there is the spread the lock
// keeps. sent: the call went out (an error then leaves its effect unknown).
func (x *extension) judge(i int, rep script.Reply, err error, won, sent bool) error {
	switch {
	case rep.Restored && !won:
		x.restores.Store(true)
		x.lost[i].Store(true)
		x.suspect[i].Store(false) // it surely wrote keys back
	case err != nil && !isReply(err) && sent && !won:
		x.unknown[i].Store(true)
	case err == nil && (x.lost[i].Load() || x.unknown[i].Load() && x.restores.Load()):
		err = &ResourceLockedError{Op: OpExtend, Requested: rep.Resources, restored: true}
	}
	// Read after lost was written: extend sets failed, then reads lost.
	if x.failed.Load() {
		gone := x.life.gone.Load()
		if gone || x.expired.Load() {
			// The lock is lost: whatever this call may have written goes,
			// also when its answer never comes (a drop sent at the failure
			// may have overtaken a write held up on the way).
			if rep.Restored || err == nil || !isReply(err) && sent {
				x.drop(i)
			}
			return err
		}
		if x.superseded() {
			// A later Extend of the lock is out or won: a drop now could
			// delete a key it counted (a node whose answer came late to
			// a failed Extend). What this answer shows is only marked.
			if x.unknown[i].Load() && x.restores.Load() {
				x.suspected(i) // it may have written keys back: no vote until a win without it
			}
			return err
		}
		if x.unknown[i].Load() && x.restores.Load() {
			// An earlier call of it may have written keys back: no vote
			// until a win without it. What it holds stays (see failedFor).
			x.suspected(i)
		}
		if rep.Restored {
			x.drop(i) // it wrote keys back: it did not hold the lock
		}
	}
	return err
}

// silent records that node i's call was sent and the collector gave up on
// it (its effect is unknown until it answers, if ever).
func (x *extension) silent(i int, won bool) {
	if !won {
		x.unknown[i].Store(true)
	}
}

// failedFor ends an Extend call that failed: it releases the lock where
// the call wrote it back, or on every node when the lock is gone from a
// quorum (expired), and so does each write of the call that lands later.
// A node whose answer never came, while another's showed that keys were
// lost, may have written them back too: it votes for the lock no more
// until an extension wins without it, but what it holds stays while the
// lock may still be held (its key may be the lock's since it was won:
// deleting it there could leave the lock on fewer than a quorum of nodes
// while its handle is valid, and another caller could take it).
func (x *extension) failedFor(n int, expired bool) {
	x.expired.Store(expired)
	x.failed.Store(true)
	for i := range n {
		if x.unknown[i].Load() && x.restores.Load() {
			x.suspected(i) // it may have written keys back
		}
		if expired || x.lost[i].Load() && !x.suspect[i].Load() {
			x.drop(i)
		}
	}
}

// suspected marks node i lost on suspicion, unless it is lost already.
// (suspect is written first: who reads lost, then suspect, sees both.)
func (x *extension) suspected(i int) {
	if !x.lost[i].Load() {
		x.suspect[i].Store(true)
		x.lost[i].Store(true)
	}
}

// superseded reports whether a later Extend of the lock began.
func (x *extension) superseded() bool {
	x.life.mu.Lock()
	defer x.life.mu.Unlock()
	return x.life.extSeq != x.seq
}

// newExtension returns the record of p, an Extend of lock under cfg. The
// lock's record of its lost nodes and drops (lockLife.lostOn) is made on
// its first Extend.
func (r *Redlock) newExtension(lock *Lock, cfg *config, p *plan) *extension {
	lf, n := lock.life, r.size()
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.lostOn == nil {
		marks := make([]atomic.Bool, 3*n)
		lf.lostOn, lf.doubted, lf.suspect, lf.drops = marks[:n:n], marks[n:2*n:2*n], marks[2*n:], make([]flight.Flight, n)
	}
	lf.extSeq++
	return &extension{lost: lf.lostOn, drops: lf.drops, doubted: lf.doubted, suspect: lf.suspect, life: lf, seq: lf.extSeq,
		unknown: make([]atomic.Bool, n), r: r, lock: lock, cfg: cfg, u: undoOf(p)}
}

// drop releases the lock on node i, sent on its own, with the kind's
// cleanup (only its own value, announcing nothing: the lock's holder would
// take an announcement of its value for a force release): a failed
// extension's write-back, or what is left of a lock gone from a quorum.
// Only the newest Extend drops, and a later one counts the node lost until
// the drop is answered: no drop lands after a write that an extension
// counted.
func (x *extension) drop(i int) {
	lf := x.life
	lf.mu.Lock()
	if lf.extSeq != x.seq && !lf.gone.Load() {
		lf.mu.Unlock()
		return
	}
	x.lost[i].Store(true)
	x.suspect[i].Store(false)
	x.drops[i].Add()
	lf.mu.Unlock()
	u := x.u
	s, keys, args := script.Cleanup, u.res, []any{x.lock.value}
	if u.s != nil {
		s, keys, args = u.s, u.keys, append([]any{x.lock.value}, u.args...)
	}
	sendCleanup(x.cfg, x.r.nodes[i], s, u.res, keys, args, u.acked, &x.drops[i], &x.doubted[i])
}

// undo is how drop releases a lock's keys, read from its extension's plan,
// which the call gives back when it returns.
type undo struct {
	s         *script.Script // nil: script.Cleanup on res
	res, keys []string
	args      []any // after the lock's value
	acked     bool
}

// undoOf returns p's undo.
func undoOf(p *plan) undo {
	return undo{s: p.undo, res: p.res, keys: p.undoKeys, args: p.undoArgs, acked: p.acked}
}

// hold makes l listen for release announcements of its own value (its
// fair waiter's id too): one from any node ends the lock (forced). It
// returns once the subscriptions on the nodes that granted it are
// confirmed (or failed), within the node timeout, half the lock's validity
// left and ctx: a force release made when Acquire returned is heard. With WithWakeOnRelease(false) it
// opens no subscription: it hears them while another call's run.
func (r *Redlock) hold(ctx context.Context, l *Lock, granted []int) {
	tag, tag2 := l.value[:min(valueLen, len(l.value))], ""
	if wk, ok := l.kind.(waitingKind); ok {
		if id := wk.waiterID(); id != "" {
			tag2 = id[:min(valueLen, len(id))]
		}
	}
	lf, cfg := l.life, l.cfg
	h := r.wake.Hold(l.resources, tag, tag2, (*holding)(l), cfg.wake)
	// An announcement may have come before Hold returned (the holder was
	// set under mu then): such a lock, forced, released or lost, listens
	// no more.
	lf.mu.Lock()
	lf.holder = h
	done := lf.forcedErr != nil || lf.releasing.Load() || lf.gone.Load()
	lf.mu.Unlock()
	if done {
		r.wake.Unhold(h)
		return
	}
	if !cfg.wake {
		return
	}
	var timer *time.Timer
	for ch := r.wake.Confirming(granted); ch != nil; ch = r.wake.Confirming(granted) {
		if timer == nil {
			// At most half of what is left of the lock's validity: the
			// lock is returned valid (was: a 3s node timeout and a 500ms
			// ttl returned it expired).
			wait := min(cfg.nodeTimeout, time.Until(l.expiration)/2)
			if wait <= 0 {
				return
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// holding is a granted lock (its first handle) as the Waker's holder of its
// value hears it (wake.Owner).
type holding Lock

// Lost ends the lock: a node announced key released from its value.
func (h *holding) Lost(node int, key string) {
	h.life.forced(h.redlock, node, key)
	h.life.reportForced(context.Background(), h.cfg, h.resources) // once per lock, whoever learns it first
}

// Over reports whether the lock can no longer be held.
func (h *holding) Over() bool { return h.life.over() }

// unhold stops lf listening (its release started, or it is lost).
func (r *Redlock) unhold(lf *lockLife) {
	lf.mu.Lock()
	h := lf.holder
	lf.mu.Unlock()
	r.wake.Unhold(h)
}

// valueArgs returns {value}, the ARGV of the lock's release: the winning
// attempt's, or a new one.
func (lf *lockLife) valueArgs(value string) []any {
	if lf.args != nil {
		return lf.args
	}
	return []any{value}
}

// valueArg returns value as an argument: boxed by the winning attempt, or
// now.
func (lf *lockLife) valueArg(value string) any {
	if lf.args != nil {
		return lf.args[0]
	}
	return value
}

// over reports whether the lock can no longer be held: released, lost, or
// past its expiration (the Waker forgets such holders).
func (lf *lockLife) over() bool {
	return lf.releasing.Load() || lf.gone.Load() || !time.Now().Before(lf.expiry())
}

// forced ends the lock on node's announcement that key was released with
// its value, unless its own release started: a force release, or a release
// through a copy of its value. Every handle is spent, Using's context and
// a term end, and its next Extend returns the error.
func (lf *lockLife) forced(r *Redlock, node int, key string) {
	if lf.releasing.Load() {
		return
	}
	err := &ExecutionError{Op: OpExtend, Resources: []string{key}, sentinel: ErrLockExpired,
		reason: fmt.Sprintf("force-released: node %d (%s) announced %q released from this lock's value; another caller may hold it now",
			node, r.nodes[node].Addr(), key)}
	lf.mu.Lock()
	if lf.forcedErr != nil || lf.handed {
		lf.mu.Unlock()
		return
	}
	lf.forcedErr = err
	lf.gone.Store(true) // under mu: startRelease hands no lost lock over
	hooks := lf.takeLost(err)
	lf.mu.Unlock()
	for _, h := range hooks {
		h.f(err)
	}
	r.unhold(lf)
}

// lostBy tells whenLost's hooks that an extension found the lock gone from
// a quorum (err), before that extension releases it anywhere: Using's
// context and a term end before another caller can take the lock.
func (lf *lockLife) lostBy(err error) {
	lf.mu.Lock()
	hooks := lf.takeLost(err)
	lf.mu.Unlock()
	for _, h := range hooks {
		h.f(err)
	}
}

// takeLost records err as the lock's first loss and returns the hooks to
// call with it; none when it was lost already. Called with mu held.
func (lf *lockLife) takeLost(err error) []*lostHook {
	if lf.lostErr != nil {
		return nil
	}
	lf.lostErr = err
	hooks := lf.onLost
	lf.onLost = nil
	return hooks
}

// whenLost has f called with the error once the lock is lost: a force
// release heard, or an extension that found it gone from a quorum (at once
// when it was), until the returned func is called.
func (lf *lockLife) whenLost(f func(error)) (stop func()) {
	lf.mu.Lock()
	if err := lf.lostErr; err != nil {
		lf.mu.Unlock()
		f(err)
		return func() {}
	}
	h := &lostHook{f: f}
	lf.onLost = append(lf.onLost, h)
	lf.mu.Unlock()
	return func() {
		lf.mu.Lock()
		defer lf.mu.Unlock()
		if i := slices.Index(lf.onLost, h); i >= 0 {
			lf.onLost = slices.Delete(lf.onLost, i, i+1)
		}
	}
}

// lostHook is one whenLost call's f.
type lostHook struct{ f func(error) }

// forcedError returns the force release heard, or nil.
func (lf *lockLife) forcedError() error {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.forcedErr == nil {
		return nil
	}
	return lf.forcedErr
}

// reportForced tells the observer, once, that the lock was force-released.
func (lf *lockLife) reportForced(ctx context.Context, cfg *config, resources []string) {
	if err := lf.forcedError(); err != nil {
		lf.reportLost(ctx, cfg, resources, err)
	}
}
