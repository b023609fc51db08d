package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redlock/redlock"
)

// The lost-lock workers of TestSafety (issue 43): Using holders of
// resources of their own, in Redlocks of their own, beside the lock workers
// and the elections through every phase. In two phases of their own an
// operator takes their locks away:
//
//   - "force releases and retakes": every 40ms it force-releases one of
//     their resources, which another worker takes at once. An old holder's
//     section must end within heardWithin of the new holder's entering (it
//     hears the announcement).
//   - "nodes lose keys": every 250ms it deletes one resource's key on 3 of
//     the 5 nodes (a majority lost its data). The old holder's next
//     extension must fail: no extension that began after the loss may win,
//     and its section ends within the lock's validity of a new holder's.
//
// Outside those events, two holders inside one resource at once is a
// violation, as for the lock workers.

const (
	lostWorkers       = 3
	lostKeys          = 2
	lostHoldTTL       = 600 * time.Millisecond
	lostHoldThreshold = 300 * time.Millisecond
	// heardWithin is how long an old holder's section may run after a new
	// holder took its force-released lock: the announcement's delay, with
	// room for a loaded -race run.
	heardWithin = 200 * time.Millisecond
)

// The operator's phases.
const (
	lostQuiet int32 = iota
	lostForcing
	lostLosingKeys
)

// lostVisit is one section of a lost-lock worker.
type lostVisit struct {
	worker int
	enter  time.Time
	// granted is the start of the attempt that won its lock: an event on
	// its resource from then on, before enter, is its lock's too.
	granted time.Time
	done    chan struct{} // closed when the section ended
	end     time.Time     // set before done is closed
	lostAt  atomic.Int64  // when its keys were lost on a majority (Unix ns); 0: not
}

// lostRun runs the lost-lock workers and their operator.
type lostRun struct {
	h      *harness
	phase  func() *phaseStats
	mode   atomic.Int32
	wg     sync.WaitGroup
	cancel context.CancelFunc
	inside [lostKeys]atomic.Pointer[lostVisit] // the section inside each resource, nil once it left
	last   [lostKeys]atomic.Pointer[lostVisit] // the section that entered each resource last
	// forcedAt and lossAt are, per resource, when the operator's last
	// force release and key loss began.
	forcedAt [lostKeys]atomic.Int64
	lossAt   [lostKeys]atomic.Int64
	// forcedEnd and lossEnd are when they ended (math.MaxInt64 while
	// under way): their deletes land on the nodes until then, on a lock
	// granted after they began too.
	forcedEnd [lostKeys]atomic.Int64
	lossEnd   [lostKeys]atomic.Int64
	cur       [lostWorkers]atomic.Pointer[lostVisit] // each worker's section
	won       [lostWorkers]atomic.Int64              // the start of each worker's last acquire that won (Unix ns)
	errs      []error
	errsMu    sync.Mutex
}

func lostKey(k int) string { return fmt.Sprintf("{lost}%d", k) }

// startLost starts the workers and the operator.
func startLost(h *harness, phase func() *phaseStats) *lostRun {
	ctx, cancel := context.WithCancel(context.Background())
	lr := &lostRun{h: h, phase: phase, cancel: cancel}
	for w := range lostWorkers {
		rl, cs, err := h.process(redlock.WithObserver(&redlock.Observer{Attempt: func(a redlock.AttemptInfo) { lr.attempted(w, a) }}))
		if err != nil {
			lr.fail(err)
			continue
		}
		lr.wg.Add(1)
		go func() {
			defer lr.wg.Done()
			defer func() {
				_ = rl.Close()
				for _, c := range cs {
					_ = c.Close()
				}
			}()
			lr.work(ctx, w, rl)
		}()
	}
	// The operator's calls must reach every node: a node timeout for a
	// machine loaded by the harness under -race (100ms missed three of five
	// in a CI run).
	op, cs, err := h.process(redlock.WithNodeTimeout(time.Second))
	if err != nil {
		lr.fail(err)
		return lr
	}
	lr.wg.Add(1)
	go func() {
		defer lr.wg.Done()
		defer func() {
			_ = op.Close()
			for _, c := range cs {
				_ = c.Close()
			}
		}()
		lr.operate(ctx, op)
	}()
	return lr
}

func (lr *lostRun) fail(err error) {
	lr.errsMu.Lock()
	lr.errs = append(lr.errs, err)
	lr.errsMu.Unlock()
}

// phaseBegins sets the operator's mode for schedule[i].
func (lr *lostRun) phaseBegins(i int) {
	switch {
	case strings.HasPrefix(schedule[i%len(schedule)].name, "force releases"):
		lr.mode.Store(lostForcing)
	case strings.HasPrefix(schedule[i%len(schedule)].name, "nodes lose keys"):
		lr.mode.Store(lostLosingKeys)
	default:
		lr.mode.Store(lostQuiet)
	}
}

// stop ends the workers and the operator, and returns the errors met.
func (lr *lostRun) stop() []error {
	lr.cancel()
	lr.wg.Wait()
	return lr.errs
}

// work holds one resource after another under Using, for 50-400ms each.
func (lr *lostRun) work(ctx context.Context, w int, rl *redlock.Redlock) {
	rng := rand.New(rand.NewPCG(uint64(200+w), 13))
	for ctx.Err() == nil {
		k := rng.IntN(lostKeys)
		hold := time.Duration(50+rng.IntN(350)) * time.Millisecond
		_ = rl.Using(ctx, []string{lostKey(k)}, lostHoldTTL, func(fctx context.Context) error {
			me := &lostVisit{worker: w, enter: time.Now(), granted: time.Unix(0, lr.won[w].Load()), done: make(chan struct{})}
			lr.cur[w].Store(me)
			ps := lr.phase()
			lr.inside[k].Store(me)
			// The operator's latest events on k before this entry: when each
			// began, then when it ended (read after: see operate).
			forced, lost := event{lr.forcedAt[k].Load(), 0}, event{lr.lossAt[k].Load(), 0}
			forced.end, lost.end = lr.forcedEnd[k].Load(), lr.lossEnd[k].Load()
			if prev := lr.last[k].Swap(me); prev != nil { // inside still, or gone
				lr.wg.Add(1)
				go lr.overlap(prev, me, forced, lost, ps)
			}
			t := time.NewTimer(hold)
			select {
			case <-fctx.Done():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			me.end = time.Now()
			close(me.done)
			lr.inside[k].CompareAndSwap(me, nil)
			lr.cur[w].CompareAndSwap(me, nil)
			ps.mu.Lock()
			ps.lostSections++
			ps.mu.Unlock()
			return nil
		}, redlock.WithAutomaticExtensionThreshold(lostHoldThreshold))
	}
}

// event is one of the operator's force releases or key losses: when it
// began and ended (Unix ns).
type event struct{ start, end int64 }

// during reports whether e may have removed a lock held from granted on,
// and began before entered: its deletes land from its start to its end.
func (e event) during(granted, entered time.Time) bool {
	return e.start != 0 && e.end >= granted.UnixNano() && e.start <= entered.UnixNano()
}

// overlap judges the section that entered a resource before me: it waits
// for its end, and counts how long it ran on after me entered (negative:
// it ended before), after the operator's latest key loss (lost) or force
// release (forced) before me entered, or for neither; a key loss first,
// whose bound (the validity) is the looser. An event counts for
// prev when its deletes may have landed on prev's lock: from the start of
// the attempt that won it (not fn's entry, a moment later: CI's run on
// 8c89356) to the event's end (not its start: a lock granted while a force
// release was under way lost its keys to it, CI's run on c8f0547).
func (lr *lostRun) overlap(prev, me *lostVisit, forced, lost event, ps *phaseStats) {
	defer lr.wg.Done()
	<-prev.done
	on := prev.end.Sub(me.enter)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	switch {
	case lost.during(prev.granted, me.enter):
		// A key loss may have taken it (with a force release too: a lock
		// granted as the forcing phase ended, and lost in the next one,
		// CI's run on a39dd62): the old holder learns it at its next
		// extension, and is bound by its validity.
		ps.lossOverlaps = append(ps.lossOverlaps, on)
		if on > lostHoldTTL {
			ps.lossPastValidity++
		}
	case forced.during(prev.granted, me.enter):
		ps.forcedOverlaps = append(ps.forcedOverlaps, on)
		if on > heardWithin {
			ps.heardLate++
		}
	case on > 0:
		ps.lostViolations++
	}
}

// attempted sees worker w's attempts: an extension that won, begun after
// its section's keys were lost on a majority, had no quorum that held the
// value.
func (lr *lostRun) attempted(w int, a redlock.AttemptInfo) {
	if a.Op == redlock.OpAcquire && a.Won {
		lr.won[w].Store(a.Stats.Start.UnixNano())
	}
	v := lr.cur[w].Load()
	if a.Op != redlock.OpExtend || !a.Won || v == nil {
		return
	}
	// Writes of an attempt begun before the loss may land after it: 20ms
	// of room on these local nodes.
	if at := v.lostAt.Load(); at != 0 && a.Stats.Start.After(time.Unix(0, at).Add(20*time.Millisecond)) {
		ps := lr.phase()
		ps.mu.Lock()
		ps.wonAfterLoss++
		ps.mu.Unlock()
	}
}

// operate is the operator: in the forcing phase a force release every
// 40ms, in the key-losing phase one resource's key deleted on 3 of the 5
// nodes every 250ms.
func (lr *lostRun) operate(ctx context.Context, op *redlock.Redlock) {
	rng := rand.New(rand.NewPCG(300, 17))
	for {
		d := 40 * time.Millisecond
		if lr.mode.Load() == lostLosingKeys {
			d = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		k := rng.IntN(lostKeys)
		switch lr.mode.Load() {
		case lostForcing:
			lr.forcedEnd[k].Store(math.MaxInt64) // before the start: a reader that sees this start sees it under way
			lr.forcedAt[k].Store(time.Now().UnixNano())
			err := op.ForceRelease(ctx, lostKey(k))
			lr.forcedEnd[k].Store(time.Now().UnixNano())
			if err != nil && !errors.Is(err, context.Canceled) {
				lr.fail(fmt.Errorf("force release of %s: %w", lostKey(k), err))
				continue
			}
			ps := lr.phase()
			ps.mu.Lock()
			ps.forceReleases++
			ps.mu.Unlock()
		case lostLosingKeys:
			victims := lr.holdersOf(k)
			lr.lossEnd[k].Store(math.MaxInt64)
			lr.lossAt[k].Store(time.Now().UnixNano()) // before the deletes: a holder may enter between them
			for _, i := range rng.Perm(safetyNodes)[:3] {
				_ = lr.h.Peek[i].Del(ctx, lostKey(k)).Err()
			}
			now := time.Now().UnixNano()
			lr.lossEnd[k].Store(now)
			for _, v := range victims {
				v.lostAt.Store(now)
			}
			ps := lr.phase()
			ps.mu.Lock()
			ps.keyLosses++
			ps.mu.Unlock()
		}
	}
}

// holdersOf returns the sections inside resource k now.
func (lr *lostRun) holdersOf(k int) []*lostVisit {
	var out []*lostVisit
	if v := lr.inside[k].Load(); v != nil {
		out = append(out, v)
	}
	return out
}

// lostTable formats the lost-lock workers' figures.
func lostTable(stats []*phaseStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nLost-lock workers: %d Using holders (separate Redlocks) of %d resources, ttl %v, threshold %v; an operator force-releases "+
		"(every 40ms) or deletes a key on 3 of 5 nodes (every 250ms) in its phases\n\n", lostWorkers, lostKeys, lostHoldTTL, lostHoldThreshold)
	b.WriteString("| fault phase | sections | force releases | old holder ran on after a retake (p50 / max) | past " + heardWithin.String() +
		" | keys lost | old holder ran on after a loss (max) | past the validity | extensions won after a loss | other overlaps |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for i, ps := range stats {
		ps.mu.Lock()
		fmt.Fprintf(&b, "| %s | %d | %d | %s / %s | %d | %d | %s | %d | %d | %d |\n", schedule[i].name, ps.lostSections, ps.forceReleases,
			signedQ(ps.forcedOverlaps, 0.5), signedQ(ps.forcedOverlaps, 1), ps.heardLate, ps.keyLosses, signedQ(ps.lossOverlaps, 1),
			ps.lossPastValidity, ps.wonAfterLoss, ps.lostViolations)
		ps.mu.Unlock()
	}
	return b.String()
}

// signedQ is the q-quantile of ds (which may be negative: the old section
// ended before the new one entered), "-" when empty.
func signedQ(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))].Round(10 * time.Microsecond).String()
}
