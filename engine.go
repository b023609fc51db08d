package redlock

import (
	"context"
	"errors"
	"math"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/wake"
)

// The retry loop: one operation's attempts, the pauses between them, and
// what ends them. The quorum (attempt.go) runs each attempt; a plan (below)
// says what the operation does differently.

// outcome is what execute settled on.
type outcome struct {
	attempts []ExecutionStats
	tries    int             // attempts made
	win      *ExecutionStats // the successful attempt, or nil
	value    string          // acquire: the successful attempt's value
	token    uint64          // the token the successful attempt's kind granted (hooks.sealed)
	choice   string          // the choice of the successful attempt's quorum (plan.choices)
	handed   *handOff        // acquire: the lock a holder handed over, instead of a win
	err      *ExecutionError
	// args is the successful attempt's ARGV (an acquire's value first):
	// read only, as the attempt's calls may still read it.
	args []any
}

// handOff is a lock passed from a releasing holder to a waiter.
type handOff struct {
	value string
	token uint64
	until time.Time // the lock's expiration, by the releasing holder's account
	chain int       // hand-overs since the nodes granted the lock, this one included
	since time.Time // when the nodes granted it
}

// run is one call's state, which the engine owns: the plan it runs (passed
// to each step, never written) is not part of it.
type run struct {
	r       *Redlock
	ctx     context.Context
	cfg     *config
	o       outcome
	start   time.Time
	timeout time.Duration // each attempt's wait for the nodes
	d       time.Duration // the drift of p.ttl
	tries   int
	args    []any // this attempt's ARGV: p.args, or with a fresh value
	// deleted marks, for a release, the nodes that deleted the value in any
	// attempt of the call (an answer that came late included): they count
	// for in later attempts, where the value is gone by our own doing.
	deleted  []atomic.Bool
	cleaning *cleanup        // the last failed attempt's release of its writes
	last     *ExecutionError // why the last attempt that ctx did not cut short failed
	waits    bool            // the call may wait for a release announcement
	wt       *wake.Waiter    // its place among the waiters, once it waits
	window   time.Time       // free wakes end here
	// carry is when a wake stops carrying over: an attempt it made that
	// open breakers kept from nodes is made again once they let a call
	// through (a node timeout), not after the retry delay, until then
	// (and never past the window), at most maxCarries times; carries
	// counts them since the wake.
	carry   time.Time
	carries int
	splits  int // the attempts in a row that split the nodes (see splitPause)
	// held is the last attempt's state, which the call reads until its
	// next attempt, or its end (see letGo).
	held *attemptState
}

// letGo lets go of the last attempt's state: the call reads it no more.
// (A failed acquire's cleanup, which the call may still await, keeps it:
// see releaseWrites.)
func (c *run) letGo() {
	if c.held != nil {
		c.held.unref()
		c.held = nil
	}
}

// maxCarries bounds the attempts a wake carries over (see run.carry): a
// breaker lets a probe through a node timeout after it opened, so the
// second finds the node if it answers; past that, nothing would get through.
const maxCarries = 3

// execute runs p until an attempt succeeds, the retries are used up, ctx
// ends, or the outcome cannot change by retrying (the lock lost for good, or
// nodes refusing what retrying cannot fix).
func (r *Redlock) execute(ctx context.Context, cfg *config, p *plan) outcome {
	c := runs.Get().(*run)
	o := c.execute(r, ctx, cfg, p)
	*c = run{}
	runs.Put(c)
	return o
}

// runs holds calls' states between calls: nothing reads one once its
// execute has returned (a kind's hooks read it only while called, and a
// release's attempts hold deleted marks of their own).
var runs = sync.Pool{New: func() any { return new(run) }}

// execute is Redlock.execute on a cleared run.
func (c *run) execute(r *Redlock, ctx context.Context, cfg *config, p *plan) outcome {
	*c = run{r: r, ctx: ctx, cfg: cfg, start: time.Now(), args: p.args}
	defer c.letGo()
	// Each attempt waits for the nodes for at most the node timeout, and
	// never past the validity of the ttl it writes (an answer after that
	// could not be used); a failed Acquire waits as long for its cleanup.
	c.timeout = cfg.nodeTimeout
	if p.ttl > 0 {
		c.d = drift(cfg.driftFactor, p.ttl)
		c.timeout = min(c.timeout, p.ttl-c.d)
	}
	if p.op == OpRelease {
		c.deleted = make([]atomic.Bool, r.size())
	}
	if err := ctx.Err(); err != nil {
		return c.fail(p, &ExecutionError{reason: "not attempted", ctxErr: err})
	}
	c.window = time.Now().Add(time.Duration(max(cfg.retryCount, 0)) * cfg.retryDelay)
	// A waiting Acquire wakes when one of its resources is released. It
	// joins the waiters after its first failed attempt, so that an
	// uncontended Acquire pays nothing; a release between that attempt and
	// joining costs at most one retry delay.
	c.waits = p.waits && cfg.wake && cfg.retryCount != 0
	defer func() {
		p.hook().ended(c, p)
		if off := r.wake.Leave(c.wt, c.o.win != nil || c.o.handed != nil); off != nil {
			r.disown(ctx, cfg, p, off.(*handOff)) // handed over as the call gave up
		}
		if c.o.win == nil && c.o.handed == nil && c.tries > 0 {
			p.hook().gaveUp(c, p)
		}
	}()
	// A call that may wait queues behind this Redlock's waiters for the same
	// resources, when there are any, before its first attempt: trying at
	// once would jump the queue, and could split the nodes with the head's
	// attempt at the next release. A kind whose waiters take their place on
	// the nodes instead joins the waiters at once (hooks.waiter): the
	// release that hands it the lock may come before its first attempt has
	// answered.
	id, atOnce := p.hook().waiter()
	if c.waits && atOnce {
		c.wt = r.wake.Join(p.res, false, p.tag(), id, maxDelay(cfg))
	}
	i := 0
	if c.waits && !atOnce && !r.wake.Idle() { // no one waits: no tag to make (Join would return nil)
		if c.wt = r.wake.Join(p.res, true, p.tag(), id, maxDelay(cfg)); c.wt != nil {
			// The pause counts as a retry, as one after an attempt does,
			// and so does each one spent behind the head (see behind): a
			// queued call makes its first attempt when woken, or when
			// the head's attempts no longer stand for its own.
			s := c.behind(p, sleepOrWake(ctx, retryDelay(cfg), c.wt.C()), retriesLeft(cfg, 0))
			if !s.alive {
				return c.fail(p, &ExecutionError{reason: "not attempted", ctxErr: ctx.Err()})
			}
			i = 1 + s.spent
			if s.woken && time.Now().Before(c.window) {
				i-- // a wake is a free retry, as after an attempt
			}
		}
	}
	for ; ; i++ {
		if c.handedOver(p) || p.hook().granted(c, p) {
			return c.o
		}
		if i > 0 && p.op == OpAcquire && r.closed.Load() {
			// Close woke the waiters: what takes something new ends here.
			return c.fail(p, &ExecutionError{reason: "the Redlock was closed while the call waited (after Close, " +
				"only the Extend and Release of locks taken before it are sent)", sentinel: ErrClosed})
		}
		if p.pastUntil == refusePastUntil && !time.Now().Before(p.until) {
			return c.fail(p, &ExecutionError{reason: "cannot extend an already-expired lock", sentinel: ErrLockExpired})
		}
		if p.abandon != nil && p.abandon.Load() {
			return c.fail(p, &ExecutionError{reason: errReleaseStarted.Error(), sentinel: ErrLockExpired})
		}
		st, as := c.try(p)
		if len(st.VotesFor) >= r.needed() && !st.Late {
			c.o.win, c.o.tries, c.o.args = &c.o.attempts[len(c.o.attempts)-1], c.tries, c.args
			return c.o
		}
		if e := c.verdict(p, st, as); e != nil {
			return c.fail(p, e)
		}
		p.hook().failed(c, p, st, as)
		if c.cfg.retryCount != -1 && i >= cfg.retryCount {
			if c.handedOver(p) { // handed over during the last attempt
				return c.o
			}
			return c.fail(p, c.last)
		}
		if p.abandon != nil && p.abandon.Load() {
			// Its release began meanwhile: no retry can succeed (was: it
			// slept the retry delay, 100-300 ms, to learn it).
			return c.fail(p, &ExecutionError{reason: errReleaseStarted.Error(), sentinel: ErrLockExpired})
		}
		s := c.pause(p, st, as, retriesLeft(cfg, i))
		if !s.alive {
			e := *c.last
			e.ctxErr = ctx.Err()
			return c.fail(p, &e)
		}
		if s.woken && time.Now().Before(c.window) {
			// A wake is a free retry within the window the options
			// promise (retries × delay), whatever is announced; past it,
			// wakes count, so that a storm of them cannot retry for ever.
			i--
		}
		i += s.spent
	}
}

// maxDelay is the longest retry delay cfg draws.
func maxDelay(cfg *config) time.Duration { return cfg.retryDelay + max(cfg.retryJitter, 0) }

// retriesLeft is how many retries cfg allows after attempt i (-1: before
// the first) besides the next attempt; -1 when they are unlimited.
func retriesLeft(cfg *config, i int) int {
	if cfg.retryCount < 0 {
		return -1
	}
	return max(cfg.retryCount-i-1, 0)
}

// try makes one attempt (with its kind's second round, hooks.sealed),
// records it, and tells the observer.
func (c *run) try(p *plan) (ExecutionStats, *attemptState) {
	q := c.r.needed()
	if p.freshValue {
		// A fresh slice: the previous attempt's calls may still read theirs.
		c.o.value = c.cfg.newValue()
		c.args = make([]any, len(p.args))
		c.args[0] = c.o.value
		copy(c.args[1:], p.args[1:])
	}
	c.tries++
	began := time.Now()
	c.letGo()
	st, as := c.r.attempt(c.ctx, c.cfg, p, c.args, c.deleted, c.timeout)
	c.held = as
	if len(st.VotesFor) >= q && time.Since(st.Start) < p.ttl-c.d {
		st, c.o.token = p.hook().sealed(c, p, st, as)
	}
	if len(st.VotesFor) >= q && p.ttl > 0 && time.Since(st.Start) >= p.ttl-c.d {
		st.Late = true
	}
	c.o.choice = st.choice
	if c.cfg.retryCount == -1 {
		c.o.attempts = append(c.o.attempts[:0], st) // unlimited: keep the last only
	} else {
		c.o.attempts = append(c.o.attempts, st)
	}
	if obs := c.cfg.observer; obs != nil && obs.Attempt != nil {
		info := AttemptInfo{Op: p.op, Resources: append([]string(nil), p.res...), Number: c.tries, Stats: cloneStats(st), Took: time.Since(began),
			Won: len(st.VotesFor) >= q && !st.Late}
		if p.ttl > 0 {
			info.Validity, info.Drift = p.ttl-c.d, c.d
		}
		safely(obs.Attempt, info)
	}
	return st, as
}

// verdict reads a failed attempt: it starts the release of what the attempt
// may have written, and returns the error that ends the call when retrying
// cannot change the outcome (else nil, with c.last set to why it failed).
func (c *run) verdict(p *plan, st ExecutionStats, as *attemptState) *ExecutionError {
	n, q := c.r.size(), c.r.needed()
	held, full, refusals := 0, 0, 0 // votes "held by another" (of them "no room left") / "no longer ours"; refusals retrying cannot fix
	var refusal *NodeError
	for _, v := range st.VotesAgainst {
		switch {
		case isLocked(v.Err) && v.Op == p.op: // a write-back's "gone" is not contention
			held++
			if v.Err.(*ResourceLockedError).full {
				full++
			}
		case refused(v.Err) != nil:
			if refusals++; refusal == nil {
				refusal = v
			}
		}
	}
	// A failed attempt releases what it may have written before anything
	// else happens (node-redlock v5 keeps partial holds across retries, and
	// waiters on one resource can then split the nodes between them until
	// they give up). Only a node that said "held by another" surely wrote
	// nothing; a vote for, an error, or no answer yet may all mean a write.
	// The release runs even when ctx has ended, and is not waited for here.
	if p.undoFailed && (held < n || p.choices) { // with choices, a "held" may be a split: that node wrote
		c.cleaning = as.releaseWrites()
	}
	// A quorum of "not held" for extend or release cannot change by
	// retrying: the value is gone from those nodes for good.
	if p.contended == nil && held > n-q {
		return &ExecutionError{reason: tally(p.op, st, held, full), sentinel: ErrLockExpired, against: st.VotesAgainst}
	}
	// Neither can a quorum out of reach for refusals: a wrong password, an
	// ACL, keys in different Cluster slots.
	if refusals > n-q {
		return refusalError(refusal, refusals, n, st.VotesAgainst)
	}
	// Contention is judged on the last attempt that ctx did not cut short:
	// one cut mid-way holds ctx errors, not the nodes' answers; one that
	// ctx ended only after it was whole counts.
	this := &ExecutionError{reason: tally(p.op, st, held, full), against: st.VotesAgainst}
	if p.contended != nil && held > n-q {
		this.sentinel = p.contended
	}
	if err := c.ctx.Err(); err != nil {
		if !cutShort(st) {
			c.last = this
		}
		e := &ExecutionError{reason: "cut short", ctxErr: err}
		if c.last != nil {
			e.reason, e.sentinel, e.against = c.last.reason, c.last.sentinel, c.last.against
		}
		return e
	}
	c.last = this
	if p.pastUntil == oneAttemptPastUntil && !time.Now().Before(p.until) {
		c.last.reason = "the lock expired before it could be released, and one attempt did not find it on a quorum: " + c.last.reason
		c.last.sentinel = ErrLockExpired
		return c.last
	}
	return nil
}

// pause waits between attempts: the retry delay, or until a release wakes
// the call, after the failed attempt st (as); a short random pause after a
// split that no one holds (see splitFree).
func (c *run) pause(p *plan, st ExecutionStats, as *attemptState, left int) slept {
	if c.wt == nil && c.waits {
		c.wt = c.r.wake.Join(p.res, false, p.tag(), p.waiterID(), maxDelay(c.cfg))
	}
	paused := time.Now()
	quick := c.splitFree(p, st, as) // may wait for the attempt's last answers: joined first, a release meanwhile wakes it
	// split: the attempt got some votes for, yet no quorum (another waiter
	// took the rest); denied: open breakers kept it from nodes.
	split, denied := len(st.VotesFor) > 0, notSent(st)
	// What its last attempt found tells the waiters behind it whether
	// they may stay quiet (see behind), and whether a node that answers
	// again should wake it (it did not hear from one).
	c.r.wake.Tried(c.wt, p.contended != nil && c.last != nil && c.last.sentinel == p.contended, missed(st))
	var s slept
	d, spread := p.hook().pause(retryDelay(c.cfg))
	// A wake whose attempt met open breakers (nodes not asked) carries
	// over: the next attempt goes when they let a call through again.
	carried := denied && c.wt != nil && paused.Before(c.carry) && c.carries < maxCarries && d > c.cfg.nodeTimeout
	if carried {
		d = c.cfg.nodeTimeout
		c.carries++
	}
	// An attempt that split the nodes with others' (each took some, none
	// a quorum) is followed by a short random pause, whatever the retry
	// delay: every contender releases what it wrote without announcing it,
	// so no wake would come while the resource is free. It counts as a
	// retry.
	if quick {
		c.splits++
		d = min(d, splitPause(paused.Sub(st.Start), c.splits))
	} else {
		c.splits = 0
	}
	if p.freshValue && split && spread {
		s = sleepOrWakeSpread(c.ctx, d, c.wt.C())
	} else {
		s = sleepOrWake(c.ctx, d, c.wt.C())
	}
	if !quick {
		// After a split no one holds, it tries again itself: the
		// head's wait is for an announcement that may never come.
		s = c.behind(p, s, left)
	}
	switch {
	case s.woken:
		c.carry, c.carries = time.Now().Add(retryDelay(c.cfg)), 0
		if c.cfg.retryCount >= 0 && c.window.Before(c.carry) {
			c.carry = c.window // carried attempts are free: only inside the window
		}
	case carried && s.alive:
		s.woken = true
	}
	if obs := c.cfg.observer; obs != nil && obs.Wait != nil {
		safely(obs.Wait, WaitInfo{Op: p.op, Resources: append([]string(nil), p.res...), Waited: time.Since(paused), Woken: s.woken})
	}
	return s
}

// behind goes on waiting, after a pause s that no wake ended, while the
// call queues behind its queue's head for resources that a release frees
// for one caller (plan.single), a node's subscription hears their releases,
// and the head's last attempt found them held by another (see
// wake.Waker.Behind): the head's attempts are the queue's (the release
// wakes it; it tries after its own pause when an announcement is lost),
// and its leaving without the lock wakes the next; or while its kind says
// that something else keeps its place (hooks.quiet). Each pause spent so counts as a retry; left is how many the
// call may spend (-1: no bound), so that it makes its last attempt when its
// retries run out.
func (c *run) behind(p *plan, s slept, left int) slept {
	for s.alive && !s.woken && (left < 0 || s.spent < left) && (p.single && c.r.wake.Behind(c.wt) || p.hook().quiet(c, p)) {
		s.spent++
		d, _ := p.hook().pause(retryDelay(c.cfg))
		next := sleepOrWake(c.ctx, d, c.wt.C())
		s.alive, s.woken = next.alive, next.woken
	}
	return s
}

// missed reports whether an attempt did not hear from a node that it
// waited for: a vote against that is neither an answer (held by another,
// a refusal) nor the collector's choice to stop waiting once the outcome
// was decided: a timeout, a call not sent, a network error.
func missed(st ExecutionStats) bool {
	for _, v := range st.VotesAgainst {
		if !isLocked(v.Err) && refused(v.Err) == nil {
			return true
		}
	}
	return false
}

// notSent reports whether an open breaker kept the attempt from a node.
func notSent(st ExecutionStats) bool {
	for _, v := range st.VotesAgainst {
		var te *NodeTimeoutError
		if errors.As(v.Err, &te) && te.CircuitOpen {
			return true
		}
	}
	return false
}

// fail ends the call with e. A failed Acquire returns once its cleanup has
// been answered (by the nodes that answered the acquire, within a node
// timeout), as node-redlock does: a process that exits right after leaves
// nothing behind (on nodes whose round trip takes less than half the
// wait). A call cut short by ctx does not wait.
func (c *run) fail(p *plan, e *ExecutionError) outcome {
	e.Op, e.Resources, e.Attempts, e.tries, e.took = p.op, p.res, c.o.attempts, c.tries, time.Since(c.start)
	c.o.err, c.o.tries = e, c.tries
	if c.cleaning != nil && c.ctx.Err() == nil {
		c.cleaning.await(c.ctx, c.timeout)
	}
	return c.o
}

// cutShort reports whether ctx ended the attempt: a node voted against with
// ctx's error.
func cutShort(st ExecutionStats) bool {
	for _, v := range st.VotesAgainst {
		if errors.Is(v.Err, context.Canceled) || errors.Is(v.Err, context.DeadlineExceeded) {
			return true
		}
	}
	return false
}

// slept is how a pause between attempts ended.
type slept struct {
	alive bool // ctx has not ended
	woken bool // a wake ended it early
	spent int  // retries spent quietly behind the head (see run.behind)
}

// sleepOrWake waits for d, or for a wake (a nil channel: none), or until
// ctx ends.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) slept {
	if d <= 0 {
		return slept{alive: ctx.Err() == nil}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return slept{alive: true}
	case <-wake:
		return slept{alive: ctx.Err() == nil, woken: true}
	case <-ctx.Done():
		return slept{}
	}
}

// splitFree reports whether the failed attempt st (as) of one resource
// split the nodes with others' and no one may hold a quorum: some nodes
// voted for it, and no value that the others named, nor one on the nodes
// that did not say (an error, no answer), can hold q of them. A lock that
// holds a quorum announces its release, even when a node it never reached
// was free: its waiters wait for that. So does a contender that took no
// node: one that split tries again soon, and its release wakes the rest.
// The nodes that had not answered when the attempt was decided count too:
// it waits for them until the attempt's deadline, or a call its lane
// dropped unsent.
func (c *run) splitFree(p *plan, st ExecutionStats, as *attemptState) bool {
	if !p.freshValue || as == nil || len(p.res) != 1 {
		// Of several resources, a node names the holder of the first
		// it found held: another may hold the rest on a quorum.
		return false
	}
	q, fors := c.r.needed(), len(st.VotesFor)
	if fors == 0 && len(st.VotesAgainst) == len(as.nodes) {
		return false // every node voted against
	}
	var seen [8]string
	holders := seen[:0]
	named := func(v *NodeError) {
		// An error, a script that does not name holders, or one of this
		// library's marks: not known (counted below).
		if le, ok := v.Err.(*ResourceLockedError); ok && le.holder != "" && !strings.HasPrefix(le.holder, script.MarkPrefix) {
			holders = append(holders, le.holder)
		}
	}
	for _, v := range st.VotesAgainst {
		named(v)
	}
	if !rivalsBelow(holders, q, 0) {
		return false // a lock holds a quorum already
	}
	late, _ := as.rest(fors+len(st.VotesAgainst), as.deadline)
	for _, v := range late {
		if v.err == nil {
			fors++
		} else {
			named(v.err)
		}
	}
	unknown := len(as.nodes) - fors - len(holders)
	return fors > 0 && unknown < q && rivalsBelow(holders, q, unknown)
}

// rivalsBelow reports whether no value among holders (one entry per node
// that named it) may hold q nodes, when it may hold unknown more.
func rivalsBelow(holders []string, q, unknown int) bool {
	for i, h := range holders {
		n := 0
		for _, o := range holders[i:] {
			if o == h {
				n++
			}
		}
		if n+unknown >= q {
			return false
		}
	}
	return true
}

// splitPause is the pause after the n-th attempt in a row (n >= 1) that
// split the nodes, took long: a random time up to twice took (at least a
// millisecond), doubled for each split in a row before it. The contenders
// that split draw different pauses, and the first to try again usually
// takes every node before the others do; as the bound grows past the
// contenders' differences in round trip (a contender near one node always
// reaches that one first), one gets ahead.
func splitPause(took time.Duration, n int) time.Duration {
	span := max(2*took, time.Millisecond) << min(n-1, 20)
	if span <= 0 || span > time.Hour { // overflow, or far past any retry delay worth capping
		span = time.Hour
	}
	return time.Duration(mrand.Int64N(int64(span)))
}

// sleepOrWakeSpread is sleepOrWake for a waiter that just split the nodes
// with a competitor: waiters in other Redlocks (other processes) wake on the
// same announcement, so a wake is followed by a random pause of up to a
// millisecond, and one of them usually takes every node before the other
// tries.
func sleepOrWakeSpread(ctx context.Context, d time.Duration, wake <-chan struct{}) slept {
	s := sleepOrWake(ctx, d, wake)
	if s.woken {
		s.alive = sleepOrWake(ctx, time.Duration(mrand.Int64N(int64(time.Millisecond))), nil).alive
	}
	return s
}

// drift is the part of a ttl that is not trusted because the nodes' clocks
// may run at different rates: round(f*ttl) + 2ms, as in node-redlock (and
// the Redis distlock spec's "small constant" for the Redis expiry resolution).
//
// A drift that would reach the ttl is capped at the ttl (no validity left,
// which validateTTL refuses); the cap also keeps the conversion back to a
// Duration from overflowing for ttls near the largest Duration.
func drift(f float64, ttl time.Duration) time.Duration {
	ms := math.Round(f*float64(ttl/time.Millisecond)) + 2
	if ms >= float64(ttl/time.Millisecond) {
		return ttl
	}
	return time.Duration(ms) * time.Millisecond
}

// retryDelay returns delay + a uniform jitter in [-j, j), never below 0, as
// node-redlock's max(0, delay + floor((rand*2-1)*j)).
func retryDelay(cfg *config) time.Duration {
	d := cfg.retryDelay
	if j := cfg.retryJitter; j > 0 {
		d += time.Duration((mrand.Float64()*2 - 1) * float64(j))
	}
	return max(d, 0)
}

// A plan is one operation as the retry loop runs it: its script and
// arguments, and the rules that differ between Acquire, Extend and Release.
// A new operation adds a plan, not a branch in execute.
type plan struct {
	op   Op
	s    *script.Script
	keys []string // the script's KEYS
	res  []string // the resources: the first of keys (a kind may add its own keys after them)
	// args are the script's ARGV; an acquire's value, args[0], is drawn
	// for each attempt (freshValue) into a copy of its own. A plan is
	// not written while its call runs (only given back after: free):
	// what a call's attempts share (the value, a release's deletes) is
	// execute's.
	args []any

	// ttl, when set, is the ttl the operation writes: an attempt whose
	// quorum came after ttl - drift counts as failed (the Redlock spec's
	// step 4), and no node's answer is waited for past that.
	ttl time.Duration
	// freshValue draws a new random value into args[0] for every attempt,
	// so that the release of a failed attempt's writes can never delete a
	// later attempt's, whatever order the commands reach a node in.
	freshValue bool
	// undoFailed releases what a failed attempt may have written before
	// anything else happens (the Redlock spec).
	undoFailed bool
	// contended is the sentinel of a quorum of votes "held by another"
	// (ErrResourceLocked), or nil when such votes say the lock is lost for
	// good (extend, release: ErrLockExpired, and the call ends at once).
	contended error
	// acked: the lock waits for replicas (WithReplicaAck): its calls take
	// the nodes' acked lanes, releases included.
	acked bool
	// choices: each node's vote for may be for a choice of its own (the
	// reply's Picks), and only the nodes of one choice can make a quorum
	// (quorum.attempt).
	choices bool
	// undo, when set, is the script that releases a failed attempt's
	// writes (an acquire's), or a failed extension's (see extension.drop), on
	// undoKeys with ARGV value, undoArgs... (a kind's own); else
	// script.Cleanup on the resources.
	undo     *script.Script
	undoKeys []string
	undoArgs []any
	// waits lets the call wait for a release announcement between attempts
	// (see WithWakeOnRelease).
	waits bool
	// single: a release frees the resources for one caller (an exclusive
	// lock), so a waiter behind its queue's head makes no attempt (see
	// run.behind).
	single bool
	// handTag, when set, lets a holder of the same Redlock hand its lock
	// to the waiting call (see handover.go).
	handTag handTag
	// raises: the plan only raises what the lock's own keys hold (a
	// kind's second round, hooks.sealed): its calls are sent unless its
	// attempt was lost, and a node that takes one late catches up.
	raises bool
	// hooks are the kind's steps in the retry loop (kind.go); nil: none.
	hooks hooks
	// until is the existing lock's expiration (extend, release); zero for
	// acquire.
	until time.Time
	// pastUntil is what happens once until has passed: the call ends
	// before an attempt (extend) or after one (release).
	pastUntil pastUntil
	// abandon, for an extend, is set once a release of the lock started:
	// from then on the extension sends nothing and makes no new attempt,
	// since it would write back the keys that the release deletes.
	abandon *atomic.Bool
	// ext, for an extend, is what the call knows of the nodes that lost
	// the lock (see lock.go's extension).
	ext *extension
	// freed marks a plan given back with the tests' poisonStates set
	// (see free).
	freed bool
}

// hook returns p's hooks.
func (p *plan) hook() hooks {
	if p.freed {
		panic("redlock: a plan read after its call gave it back")
	}
	if p.hooks == nil {
		return noHooks{}
	}
	return p.hooks
}

// handTag is what a waiter and a holder must share for a hand-over: the
// same ttl, whether the lock carries a token, and acknowledgement.
type handTag struct {
	ttl   time.Duration
	token bool
	ack   lane.Ack
	acked bool
}

// pastUntil says how an operation on an existing lock treats its expiration.
type pastUntil uint8

const (
	ignoreUntil         pastUntil = iota // acquire: no existing lock
	refusePastUntil                      // extend: an expired lock cannot be extended
	oneAttemptPastUntil                  // release: one attempt deletes what may be left
)

// acquirePlan locks keys for ttl.
func acquirePlan(keys []string, ttl time.Duration) *plan {
	// execute draws each attempt's value into args[0]; args[1] is the ttl.
	return pooled(plan{op: OpAcquire, s: script.Acquire, keys: keys, res: keys, args: []any{nil, int64(ttl / time.Millisecond)},
		ttl: ttl, freshValue: true, undoFailed: true, contended: ErrResourceLocked, waits: true, single: true})
}

// newExtendPlan is the plan that sets the ttl of a lock's resources, which
// hold value until until, to ttl.
func newExtendPlan(resources []string, value string, until time.Time, ttl time.Duration) *plan {
	return extendPlanWith(resources, value, until, ttl)
}

// extendPlanWith is newExtendPlan with the value as an argument (boxed
// already: see lockLife.valueArgs).
func extendPlanWith(resources []string, value any, until time.Time, ttl time.Duration) *plan {
	return pooled(plan{op: OpExtend, s: script.Extend, keys: resources, res: resources, args: []any{value, int64(ttl / time.Millisecond)},
		ttl: ttl, until: until, pastUntil: refusePastUntil})
}

// newReleasePlan is the plan that deletes a lock's resources where they hold
// value, counting until as the lock's expiration.
func newReleasePlan(resources []string, value string, until time.Time) *plan {
	return releasePlanWith(resources, []any{value}, until)
}

// releasePlanWith is newReleasePlan with its ARGV: {value}, which no one
// writes.
func releasePlanWith(resources []string, args []any, until time.Time) *plan {
	return pooled(plan{op: OpRelease, s: script.Release, keys: resources, res: resources, args: args,
		until: until, pastUntil: oneAttemptPastUntil})
}

// plans holds the plans of acquires, extensions and releases between calls
// (see pooled); plansFreed counts, with poisonStates set, those given back.
var (
	plans      sync.Pool
	plansFreed atomic.Int64
)

// pooled returns p in a plan from plans. Its call gives it back (free)
// once nothing reads it: an acquire's at the end of grant, an extension's
// or a release's at the end of its call (what an extension's late answer
// needs to drop its writes is copied: see undoOf).
func pooled(p plan) *plan {
	pp, _ := plans.Get().(*plan)
	if pp == nil {
		pp = new(plan)
	}
	*pp = p
	return pp
}

// free gives p back to plans: nothing reads it after. With the tests'
// poisonStates set, every other one is marked freed instead, and a call's
// step that reads it afterwards panics (see hook).
func (p *plan) free() {
	if poisonStates.Load() {
		if plansFreed.Add(1)%2 == 1 {
			*p = plan{freed: true}
			return
		}
	}
	*p = plan{}
	plans.Put(p)
}

// waiterID is the call's id among the waiters (hooks.waiter), or "".
func (p *plan) waiterID() string {
	id, _ := p.hook().waiter()
	return id
}
