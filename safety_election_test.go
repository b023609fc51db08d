package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// The election part of TestSafety. Candidates, each a Redlock with clients
// of its own through the harness's proxies (as separate processes would
// have), campaign for a few elections while the lock workers run, under the
// same fault schedule. Each leader's fn records its time as the leader
// against a witness, as the lock workers record their critical sections:
// a second leader of one election inside fn while the first's term is
// still live by its own account (its context has not ended) is an overlap;
// a leader whose term number is at or below that of a leader that entered
// before it is a term-order violation. fn honours its context: it stops
// acting as the leader as soon as the term's context ends.
//
// Terms are not lost under a faulty minority of nodes, so once a phase (in
// its first half) the next leader of one election (in turn) is cut off from
// every node: its clients are closed under it, as when a process's
// connections are refused. Its term must end (cause ErrExtensionFailed)
// before its successor's begins; the candidate then comes back as a new
// process (a new Redlock and new clients). Every lost term's context must
// end before the end of its validity as the library computed it (its
// observer): one that ends after it fails the harness.

// safetyElections is how many elections TestSafety runs.
var safetyElections = 2

const (
	safetyCandidates = 3                      // per election, each its own Redlock
	termTTL          = safetyTTL              // the delayed restart of a killed node covers terms too
	termThreshold    = 300 * time.Millisecond // extended when less than this is left
	// A waiting candidate tries every 50-75ms (a resigned term's
	// successor is woken by the release at once). A term's Extend makes one
	// attempt: when it fails, the extender waits a retry delay before the
	// next, so that a lost term's validity ends during such a wait; the
	// term's context must end before the validity all the same, at its
	// cancel point (validity's end less 75ms, a quarter of the threshold),
	// not when the next Extend
	// finds the lock expired (it once ended up to a retry delay after the
	// validity, while a successor led: the witness counted those overlaps;
	// then up to 18ms after it, by the Extend's failure path and timer
	// lateness; a 20ms cancel point left 5 of 230 up to 36ms after it at
	// 100,000 sections under load: the late-context check below counts
	// those).
	termRetryCount = 0
	termRetryDelay = 50 * time.Millisecond
	termJitter     = 25 * time.Millisecond
	// cutOffBound is how long a cut-off leader waits for its term's
	// context to end before it gives up (and the harness fails).
	cutOffBound = 4 * termTTL
)

// leaderVisit is one term as its leader's fn sees it.
type leaderVisit struct {
	ctx    context.Context // the term's: live while it leads by its own account
	number uint64          // the term's number, set before fn begins
	id     string          // its candidate's
	// entered is when fn began (Unix ns); log is what the term's calls
	// did, as its observer saw them, printed when it overlaps another.
	entered atomic.Int64
	logMu   sync.Mutex
	log     []string
	// valid is the end (Unix ns) of the validity of the term's newest
	// grant or extension, as the library computed it (its observer).
	valid atomic.Int64
	ended atomic.Int64 // when ctx was seen to end (Unix ns); 0 until then
}

// note adds an event to v's log, stamped relative to the harness's start.
func (v *leaderVisit) note(format string, args ...any) {
	v.logMu.Lock()
	defer v.logMu.Unlock()
	if len(v.log) < 64 {
		v.log = append(v.log, fmt.Sprintf("%s ", time.Since(harnessStart).Round(10*time.Microsecond))+fmt.Sprintf(format, args...))
	}
}

// describe is v's account of itself, for an overlap's report.
func (v *leaderVisit) describe() string {
	v.logMu.Lock()
	defer v.logMu.Unlock()
	ended, cause := "live", ""
	if e := v.ended.Load(); e != 0 {
		ended = fmt.Sprintf("ended at %v", time.Unix(0, e).Sub(harnessStart).Round(10*time.Microsecond))
	}
	if v.ctx != nil && v.ctx.Err() != nil {
		cause = fmt.Sprint(context.Cause(v.ctx))
	}
	valid := time.Unix(0, v.valid.Load()).Sub(harnessStart).Round(10 * time.Microsecond)
	return fmt.Sprintf("%s term %d entered %v, valid to %v, %s %s:\n    %s", v.id, v.number,
		time.Unix(0, v.entered.Load()).Sub(harnessStart).Round(10*time.Microsecond), valid, ended, cause, strings.Join(v.log, "\n    "))
}

// harnessStart is the origin of the visits' logs.
var harnessStart = time.Now()

// seenEnded records now as the end of v's context, unless an earlier time
// was recorded, and returns the recorded time.
func (v *leaderVisit) seenEnded() time.Time {
	v.ended.CompareAndSwap(0, time.Now().UnixNano())
	return time.Unix(0, v.ended.Load())
}

// lostTerm reports whether ctx ended because its term was lost.
func lostTerm(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), redlock.ErrExtensionFailed)
}

// electionWitness watches one election.
type electionWitness struct {
	name   string
	inside atomic.Pointer[leaderVisit] // the leader inside fn
	last   atomic.Pointer[leaderVisit] // the leader that entered fn last
	top    atomic.Uint64               // the highest term number that entered fn
	topAt  atomic.Int64                // when it entered (Unix ns)
	cutOff atomic.Bool                 // the next leader to enter is cut off from every node
}

// elections runs the candidates of every election of one TestSafety.
type elections struct {
	h         *harness
	phase     func() *phaseStats // the running phase's figures
	witnesses []*electionWitness
	wg        sync.WaitGroup
	cancel    context.CancelFunc
	began     atomic.Int64 // the running phase's start (Unix ns)
	// lost terms whose context ended after their validity's end, and the
	// latest of those ends past it
	late, lateBy atomic.Int64
	// terms at or below one that entered before a node lost its counters
	// (the documented limit, as the lock workers' afterLoss: not counted)
	afterLoss atomic.Int32
	mu        sync.Mutex
	errs      []error // from making a candidate's Redlock
}

// startElections starts safetyCandidates candidates for each of
// safetyElections elections; stop ends them.
func startElections(h *harness, phase func() *phaseStats) *elections {
	ctx, cancel := context.WithCancel(context.Background())
	el := &elections{h: h, phase: phase, cancel: cancel}
	el.began.Store(time.Now().UnixNano())
	for e := range safetyElections {
		w := &electionWitness{name: fmt.Sprintf("safety-%d", e)}
		el.witnesses = append(el.witnesses, w)
		for n := range safetyCandidates {
			c := &campaigner{el: el, w: w, id: fmt.Sprintf("e%dc%d", e, n), n: n, lead: n%2 == 0,
				rng: rand.New(rand.NewPCG(uint64(100+e*safetyCandidates+n), 11))}
			el.wg.Add(1)
			go c.run(ctx)
		}
	}
	return el
}

// phaseBegins records the start of the i-th phase, and has the next
// leader of one election (in turn) cut off from every node.
func (el *elections) phaseBegins(i int) {
	el.began.Store(time.Now().UnixNano())
	el.witnesses[i%len(el.witnesses)].cutOff.Store(true)
}

// phaseStart is when the running phase began.
func (el *elections) phaseStart() time.Time { return time.Unix(0, el.began.Load()) }

// stop ends every campaign and term, and waits for the candidates to close
// their Redlocks and clients; it returns the errors met making them, and
// one more when a lost term's context ended after its validity's end (the
// docs of Term.Context and Using promise before).
func (el *elections) stop() []error {
	el.cancel()
	el.wg.Wait()
	if n := el.late.Load(); n > 0 {
		el.errs = append(el.errs, fmt.Errorf("%d lost terms' contexts ended after their validity's end (the latest by %v): "+
			"a term's context must end before its validity, at its cancel point", n, time.Duration(el.lateBy.Load())))
	}
	return el.errs
}

// endedLate counts a lost term whose context ended after its validity's
// end, by by.
func (el *elections) endedLate(by time.Duration) {
	el.late.Add(1)
	for {
		old := el.lateBy.Load()
		if int64(by) <= old || el.lateBy.CompareAndSwap(old, int64(by)) {
			return
		}
	}
}

func (el *elections) fail(err error) {
	el.mu.Lock()
	el.errs = append(el.errs, err)
	el.mu.Unlock()
}

// campaigner is one candidate: it campaigns, leads for a while, resigns,
// and campaigns again, until its ctx ends. Even candidates use Lead, odd
// ones Campaign and Resign (two and one of each election's three).
type campaigner struct {
	el      *elections
	w       *electionWitness
	id      string
	n       int
	lead    bool
	rng     *rand.Rand
	rl      *redlock.Redlock
	clients []*redis.Client
}

func (c *campaigner) run(ctx context.Context) {
	defer c.el.wg.Done()
	defer func() { c.exit() }()
	if !c.start() {
		return
	}
	for ctx.Err() == nil {
		// As half the lock workers do, two candidates of each election
		// (one with Lead, one with Campaign) campaign with a ctx that ends
		// 0-20ms in during the cancelling phase: with Lead, it bounds the
		// campaign and the term; with Campaign, the campaign only.
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if c.n < 2 && c.el.h.cancelEarly.Load() {
			cctx, cancel = context.WithTimeout(ctx, time.Duration(c.rng.IntN(20000))*time.Microsecond)
		}
		v := &leaderVisit{id: c.id}
		// The observer gives the term's number to Lead's fn (which gets
		// no Term), and the validity of its grant and of each extension;
		// and keeps the term's log (an acquire's only once it won).
		obs := redlock.WithObserver(&redlock.Observer{
			Attempt: func(a redlock.AttemptInfo) {
				if a.Won && (a.Op == redlock.OpAcquire || a.Op == redlock.OpExtend) {
					v.valid.Store(a.Stats.Start.Add(a.Validity).UnixNano())
				}
				if a.Op != redlock.OpAcquire || a.Won {
					against := make([]string, 0, len(a.Stats.VotesAgainst))
					for _, ne := range a.Stats.VotesAgainst {
						against = append(against, fmt.Sprintf("%d: %.60s", ne.Node, ne.Err))
					}
					v.note("%v #%d began %v took %v won=%v late=%v for=%v against=%v", a.Op, a.Number,
						a.Stats.Start.Sub(harnessStart).Round(10*time.Microsecond), a.Took.Round(10*time.Microsecond), a.Won, a.Stats.Late, a.Stats.VotesFor, against)
				}
			},
			Done: func(ci redlock.CallInfo) {
				if ci.Op == redlock.OpAcquire && ci.Err == nil {
					v.number = ci.Token
				}
				if ci.Op != redlock.OpAcquire || ci.Err == nil {
					v.note("%v done (%d tries) err=%.200v", ci.Op, ci.Tries, ci.Err)
				}
			},
			Lost: func(li redlock.LostInfo) { v.note("lost: %.200v", li.Err) },
		})
		hold := c.hold()
		cut := false
		e := c.rl.Election(c.w.name)
		if c.lead {
			_ = e.Lead(cctx, c.id, termTTL, func(tctx context.Context) error {
				cut = c.leads(tctx, v, hold, ctx.Done())
				return nil
			}, obs)
		} else if term, err := e.Campaign(cctx, c.id, termTTL, obs); err == nil {
			v.number = term.Number()
			cut = c.leads(term.Context(), v, hold, ctx.Done())
			_ = term.Resign(context.Background())
		}
		cancel()
		if cut && !c.restart() {
			return
		}
	}
}

// hold is how long a leader leads: mostly 5-50ms (many hand-overs), one
// term in four 200-400ms, across an extension. (Terms of a few ms each,
// about three times as many, made the lock workers half again as slow on
// this 2-core machine.) No term outlasts the 600ms a killed node stays
// down, nor does a cut-off one (see leads): a term is granted while it is
// down, on a quorum of the other nodes, which carries the term numbers
// over its restart with no counters. Without that grant, the counters a
// restart loses can be those of a whole write-back quorum, which the
// numbers are documented not to survive (RELIABILITY.md, "Tokens and data
// loss").
func (c *campaigner) hold() time.Duration {
	if c.rng.IntN(4) == 0 {
		return 200*time.Millisecond + time.Duration(c.rng.IntN(200))*time.Millisecond
	}
	return time.Duration(5000+c.rng.IntN(45000)) * time.Microsecond
}

// leads is the leader's fn: it records the term against the witness, leads
// for hold or until the term's context ends (or quit closes), and reports
// whether it was the leader cut off from every node.
func (c *campaigner) leads(ctx context.Context, v *leaderVisit, hold time.Duration, quit <-chan struct{}) (cut bool) {
	w, ps := c.w, c.el.phase()
	v.ctx = ctx
	entered := time.Now()
	if ctx.Err() != nil {
		// Ended before fn began (the caller's ctx, in the cancelling
		// phase): it never acts as the leader.
		ps.mu.Lock()
		ps.terms++
		if lostTerm(ctx) {
			ps.termsLost++
		}
		ps.mu.Unlock()
		return false
	}
	v.entered.Store(entered.UnixNano())
	context.AfterFunc(ctx, func() { v.seenEnded(); v.note("context ended: %v", context.Cause(ctx)) })
	// Another leader inside, whose term is live by its own account, is two
	// leaders at once.
	overlap, note := false, ""
	if prev := w.inside.Swap(v); prev != nil && prev.ctx.Err() == nil {
		overlap, note = true, "entered while another led:\n  "+prev.describe()+"\n  "
	}
	orderViolation := false
	for {
		top := w.top.Load()
		if v.number <= top {
			// A term at or below one granted before a node was killed and
			// came back empty is the documented limit (RELIABILITY.md,
			// "Tokens and data loss"), as for the lock workers' tokens:
			// dated from a ttl before it entered, its grant's earliest.
			if c.el.h.lostSince(w.topAt.Load() - int64(termTTL)) {
				c.el.afterLoss.Add(1)
			} else {
				orderViolation = true
			}
			break
		}
		if w.top.CompareAndSwap(top, v.number) {
			w.topAt.Store(entered.UnixNano())
			break
		}
	}
	// After a lost term: how long before this one began its context ended.
	gap, afterLoss := time.Duration(0), false
	if prev := w.last.Swap(v); prev != nil && lostTerm(prev.ctx) {
		gap, afterLoss = entered.Sub(prev.seenEnded()), true
	}
	// Only in the first half of a phase: the term is lost within its ttl
	// and its successor granted before the phase ends.
	if time.Since(c.el.phaseStart()) < phaseLength/2 && w.cutOff.CompareAndSwap(true, false) {
		cut = true
		for _, cl := range c.clients {
			_ = cl.Close()
		}
		hold = cutOffBound
	}
	t := time.NewTimer(hold)
	quitting := false
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-quit:
		quitting = true
	}
	t.Stop()
	if cur := w.inside.Load(); cur != v && cur != nil && cur.ctx.Err() == nil && ctx.Err() == nil {
		overlap, note = true, note+"another entered while it led:\n  "+cur.describe()+"\n  "
	}
	w.inside.CompareAndSwap(v, nil)

	lost := lostTerm(ctx)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.terms++
	if overlap {
		ps.termOverlaps++
		ps.overlapNotes = append(ps.overlapNotes, fmt.Sprintf("%s: %s\n  %s", w.name, note, v.describe()))
	}
	if orderViolation {
		ps.termOrder++
	}
	if lost {
		ps.termsLost++
		// How long before the validity the library computed for the
		// term's newest grant or extension its context ended.
		if valid := v.valid.Load(); valid != 0 {
			m := time.Unix(0, valid).Sub(v.seenEnded())
			ps.lossMargins = append(ps.lossMargins, m)
			if m < 0 {
				c.el.endedLate(-m)
			}
		}
	}
	if cut {
		ps.cutOff++
		if ctx.Err() == nil && !quitting {
			ps.cutNotEnded++
		}
	}
	if afterLoss {
		ps.successorGaps = append(ps.successorGaps, gap)
	}
	return cut
}

// start makes the candidate's Redlock and clients.
func (c *campaigner) start() bool {
	rl, cs, err := c.el.h.process(redlock.WithAutomaticExtensionThreshold(termThreshold),
		redlock.WithRetryCount(termRetryCount), redlock.WithRetryDelay(termRetryDelay), redlock.WithRetryJitter(termJitter))
	if err != nil {
		c.el.fail(fmt.Errorf("candidate %s: %w", c.id, err))
		return false
	}
	c.rl, c.clients = rl, cs
	return true
}

// exit closes the candidate's Redlock, then its clients.
func (c *campaigner) exit() {
	if c.rl != nil {
		_ = c.rl.Close()
	}
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	c.rl, c.clients = nil, nil
}

// restart replaces a cut-off candidate by a new process.
func (c *campaigner) restart() bool {
	c.exit()
	return c.start()
}
