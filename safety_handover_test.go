package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// The contended hand-over part of TestSafetyKinds. Beside the semaphore
// and read-write workers, under the same fault schedule and then under
// three phases of its own, five processes (Redlocks with clients of their
// own, through the fault proxies) run three goroutines each that contend
// for two resources, so that a release often finds a waiter of its own
// Redlock for the same resource with the same ttl (WithHandOver: the lock
// passes to it with no round trip), or waiters queued on the nodes
// (WithFairQueue: the release hands the resource to the head):
//
//   - "default": the default options (hand-over on), two goroutines with
//     Acquire and Release, one with Using; one lock in eight takes both
//     resources;
//   - "long chains": WithHandOver(64, 1s), Acquire and Release: a paused
//     holder hands over with as little as half the ttl left;
//   - "fenced": WithFencing(true) with hand-over (the waiter draws the
//     token + 1 on a quorum), two with Acquire, one with Using;
//   - "fair": WithFairQueue(true), two with Acquire, one with Using; one
//     lock in sixteen takes both resources;
//   - "fair, killed": WithFairQueue(true), Acquire and Release.
//
// Every lock is exclusive on the same two resources, whatever its options:
// fair, unfair and fenced locks contend for them together. A witness
// counts, as the lock workers' does, a holder that enters or leaves its
// section while another whose lock is still valid by its own account
// (Valid; under Using, fn's context not ended) is inside: a violation;
// a fenced holder whose token is at or below one that entered before it
// on the same resource: a token violation; and a grant whose value is that
// of the holder that released last (received by a hand-over) that expires
// after that holder's lock would have: a lengthened validity. It must
// count none. It also counts the Releases that report HandedOver, so that
// the phases show hand-overs happened. Figures are counted in the phase
// each call began in.
//
// The three phases of its own (handOverPhases) are the faults of issue 27:
// a dead head of the queue (ghost waiters put first in the nodes' queues,
// which never ask again; processes whose clients are closed under their
// waiters, then replaced; waiters that give up at random moments), a node
// missing from a quorum's queue (its queues deleted, another node stopped
// with SIGSTOP while waiters queue), and holders paused before their
// Release (past their validity, or to less than half the ttl).

const (
	handKeys      = 2
	handWaitMax   = 1500 * time.Millisecond // how long a waiter waits at most
	handThreshold = 300 * time.Millisecond  // Using's extension threshold
	handGhostLive = 400 * time.Millisecond  // how long a ghost's place in the queues lasts
)

// handKey is the i-th resource of the hand-over workers.
func handKey(i int) string { return "hand-" + strconv.Itoa(i) }

// handOverPhases are the contended hand-over phases, run after the
// schedule in each round of TestSafetyKinds. Like the schedule's, they
// keep the faulty nodes a minority: one node stopped at a time, and queues
// (not locks) deleted on another.
var handOverPhases = []phase{
	{name: "contended hand-over: dead heads (ghost waiters first in the queues, 2 processes' clients closed under their waiters, waiters giving up 0-200ms in)",
		start: func(h *harness) { h.hand.giveUp.Store(true); h.hand.fault(h, h.hand.deadHeads) },
		end:   func(h *harness) { h.hand.stopFault(); h.hand.giveUp.Store(false) }},
	{name: "contended hand-over: one node's queues deleted every 100ms, another stopped (SIGSTOP) 300ms in every 600ms",
		start: func(h *harness) { h.hand.fault(h, h.hand.missingQueues) },
		end:   func(h *harness) { h.hand.stopFault() }},
	{name: "contended hand-over: one holder in three paused 0.2-1.2 x ttl before its Release",
		start: func(h *harness) { h.hand.pauseHolders.Store(true) },
		end:   func(h *harness) { h.hand.pauseHolders.Store(false) }},
}

// handProc is one process of the hand-over workers: its Redlock and
// clients, replaced when it is killed.
type handProc struct {
	name     string
	opts     []redlock.Option // New's, beside the harness's
	fenced   bool
	fair     bool
	using    int // how many of its goroutines use Using (the first ones)
	multi    int // one lock in multi takes both resources (0: none)
	killable bool

	mu      sync.Mutex
	rl      *redlock.Redlock
	clients []*redis.Client
	dead    bool // clients closed, not yet replaced

	// Its figures over the whole run: sections, acquires that failed, and
	// the time its acquires took.
	sections, failed atomic.Int64
	waited           atomic.Int64 // ns
}

// current returns the process's Redlock, or nil while it is dead.
func (p *handProc) current() *redlock.Redlock {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil
	}
	return p.rl
}

// handHolder is one holder in the hand-over witness.
type handHolder struct {
	valid func() bool
}

// handWitness is who holds each resource.
type handWitness struct {
	inside [handKeys]atomic.Pointer[handHolder]
	top    [handKeys]atomic.Uint64            // the highest token that entered a section
	topWho [handKeys]atomic.Pointer[string]   // who entered with it, and when
	topAt  [handKeys]atomic.Int64             // when (Unix ns)
	last   [handKeys]atomic.Pointer[handLast] // the last holder that released (nil: unknown, a Using)
}

// handLast is a holder about to release: its value and its expiration.
type handLast struct {
	value string
	until time.Time
}

// enter puts me inside keys and reports whether another valid holder was.
func (w *handWitness) enter(keys []int, me *handHolder) bool {
	bad := false
	for _, k := range keys {
		if prev := w.inside[k].Swap(me); prev != nil && prev.valid() && me.valid() {
			bad = true
		}
	}
	return bad
}

// leave takes me out of keys and reports whether another valid holder is
// inside one of them while me is still valid.
func (w *handWitness) leave(keys []int, me *handHolder) bool {
	bad := false
	for _, k := range keys {
		if cur := w.inside[k].Load(); cur != me && cur != nil && cur.valid() && me.valid() {
			bad = true
		}
		w.inside[k].CompareAndSwap(me, nil)
	}
	return bad
}

// token reports whether tok, of the holder who, granted no earlier than
// entered (no node took its write-back before), is at or below a token
// that entered keys before, and describes that one and when it was
// granted.
func (w *handWitness) token(keys []int, tok uint64, who string, entered time.Time) (low bool, above string, at time.Time) {
	for _, k := range keys {
		for {
			top := w.top[k].Load()
			if tok <= top {
				low = true
				if d := w.topWho[k].Load(); d != nil {
					above, at = *d, time.Unix(0, w.topAt[k].Load())
				}
				break
			}
			if w.top[k].CompareAndSwap(top, tok) {
				w.set(k, tok, who, entered)
				break
			}
		}
	}
	return low, above, at
}

// set records tok as the top token of key k.
func (w *handWitness) set(k int, tok uint64, who string, entered time.Time) {
	d := fmt.Sprintf("%s with token %d at %s", who, tok, entered.Format("15:04:05.000000"))
	w.topWho[k].Store(&d)
	w.topAt[k].Store(entered.UnixNano())
}

// restart makes tok the top token of keys, after a node's data loss
// excused a token at or below the top: the tokens after it are checked
// against it.
func (w *handWitness) restart(keys []int, tok uint64, who string, entered time.Time) {
	for _, k := range keys {
		if top := w.top[k].Load(); tok < top && w.top[k].CompareAndSwap(top, tok) {
			w.set(k, tok, who, entered)
		}
	}
}

// fenced checks the token tok of a holder that entered keys, and reports
// whether it is a token violation: at or below a token that entered
// before, while the holder is valid. Two cases are counted apart:
//   - a holder no longer valid when it entered (its goroutine was not run
//     for its validity, or more) may have been granted before the one that
//     entered last: its token is stale, as a fenced resource would refuse
//     it, not out of order;
//   - a token at or below one granted before a node was killed, when it
//     enters after the node came back empty: the counters of a write-back
//     that reached a bare quorum do not survive the loss of one of its
//     nodes (RELIABILITY.md, "Tokens and data loss"). The witness checks
//     the tokens after it against it (restart).
func (hw *handWorkers) fenced(keys []int, tok uint64, valid bool, who string, entered time.Time, hs *handStats) bool {
	low, above, at := hw.w.token(keys, tok, who, entered)
	if !low {
		return false
	}
	now := time.Now()
	lost := hw.h.lostSince(at.UnixNano())
	if lost {
		hw.w.restart(keys, tok, who, entered)
	}
	hw.note(fmt.Sprintf("%s entered %v with token %d (valid: %v, a node lost its counters since: %v) at %s after %s", who, handResources(keys), tok, valid, lost,
		now.Format("15:04:05.000000"), above))
	switch {
	case !valid:
		hs.add(func(hs *handCounts) { hs.staleTokens++ })
	case lost:
		hs.add(func(hs *handCounts) { hs.afterLoss++ })
	}
	return valid && !lost
}

// note records what a witness saw, for the report.
func (hw *handWorkers) note(s string) {
	hw.mu.Lock()
	if len(hw.notes) < 20 {
		hw.notes = append(hw.notes, s)
	}
	hw.mu.Unlock()
}

// handCounts are the figures of one phase, or of several.
type handCounts struct {
	sections, usingSections            int
	fenced, fair                       int
	violations, tokenViol              int
	staleTokens                        int // holders no longer valid when they entered, with a token at or below one before
	afterLoss                          int // tokens at or below one that entered before a node lost its counters
	handedOver                         int // Releases that reported HandedOver
	received                           int // grants whose value was the last holder's
	longer                             int // of them, those that expire after that holder's lock would have
	queueHanded                        int // fair grants with no winning attempt: handed through the nodes' queues
	locked, failed, relFailed          int
	paused, pausedPast                 int // holders paused before their Release; of them, past their validity
	ghosts, ghostsHanded, ghostsQuorum int
	kills, queuesDeleted, stops        int
}

// handStats are the figures of one phase.
type handStats struct {
	mu sync.Mutex
	handCounts
}

func (hs *handStats) add(f func(*handCounts)) {
	hs.mu.Lock()
	f(&hs.handCounts)
	hs.mu.Unlock()
}

// handWorkers runs the hand-over workers until end.
type handWorkers struct {
	h     *harness
	procs []*handProc
	stats []*handStats
	phase func() int
	w     handWitness
	wg    sync.WaitGroup
	stop  chan struct{}
	mu    sync.Mutex
	errs  []error
	notes []string // what the witness saw of each token violation

	giveUp       atomic.Bool // waiters give up 0-200ms in, one in two
	pauseHolders atomic.Bool // one holder in three pauses before its Release

	faultStop chan struct{}
	faultWG   sync.WaitGroup
	closing   sync.WaitGroup
}

// startHandOver starts the hand-over workers on h's proxies.
func startHandOver(h *harness, phases int, phase func() int) *handWorkers {
	hw := &handWorkers{h: h, stats: make([]*handStats, phases), phase: phase, stop: make(chan struct{})}
	for i := range hw.stats {
		hw.stats[i] = &handStats{}
	}
	h.hand = hw
	hw.procs = []*handProc{
		{name: "default", using: 1, multi: 8},
		{name: "long chains", opts: []redlock.Option{redlock.WithHandOver(64, time.Second)}, killable: true},
		{name: "fenced", fenced: true, using: 1},
		{name: "fair", opts: []redlock.Option{redlock.WithFairQueue(true)}, fair: true, using: 1, multi: 16},
		{name: "fair, killed", opts: []redlock.Option{redlock.WithFairQueue(true)}, fair: true, killable: true},
	}
	for pi, p := range hw.procs {
		if !hw.open(p) {
			continue
		}
		for g := range 3 {
			hw.wg.Add(1)
			go hw.work(p, g, rand.New(rand.NewPCG(uint64(pi*3+g), 27)))
		}
	}
	return hw
}

// open makes p's Redlock and clients. Waiters wait for a wake, or retry
// every 50-75ms.
func (hw *handWorkers) open(p *handProc) bool {
	opts := append([]redlock.Option{redlock.WithRetryDelay(50 * time.Millisecond), redlock.WithRetryJitter(25 * time.Millisecond)}, p.opts...)
	rl, cs, err := hw.h.process(opts...)
	if err != nil {
		hw.fail(fmt.Errorf("process %q: %w", p.name, err))
		return false
	}
	p.mu.Lock()
	p.rl, p.clients, p.dead = rl, cs, false
	p.mu.Unlock()
	return true
}

func (hw *handWorkers) fail(err error) {
	hw.mu.Lock()
	hw.errs = append(hw.errs, err)
	hw.mu.Unlock()
}

// work is one goroutine of p, until end.
func (hw *handWorkers) work(p *handProc, g int, rng *rand.Rand) {
	defer hw.wg.Done()
	for {
		select {
		case <-hw.stop:
			return
		default:
		}
		rl := p.current()
		if rl == nil { // killed: its replacement comes
			time.Sleep(5 * time.Millisecond)
			continue
		}
		// The fair processes lock the second resource (or both), the
		// others the first, or one time in eight the second: a fair queue
		// hands a resource to its head while anyone queues, so that the
		// others get the second only when no fair waiter waits.
		keys := []int{0}
		if p.fair || rng.IntN(8) == 0 {
			keys = []int{1}
		}
		if p.multi > 0 && rng.IntN(p.multi) == 0 {
			keys = []int{0, 1}
		}
		// A fair queue's resource seldom comes free for the others: they
		// wait for it 100ms at most.
		wait := handWaitMax
		if !p.fair && slices.Contains(keys, 1) {
			wait = 100 * time.Millisecond
		}
		hs := hw.stats[hw.phase()]
		if g < p.using {
			hw.using(p, g, rl, keys, wait, rng, hs)
		} else {
			hw.plain(p, g, rl, keys, wait, rng, hs)
		}
	}
}

// waitCtx is the ctx of one acquire that waits up to d; in the cancelling
// phase half the callers cancel 0-20ms in, and in the dead heads' phase
// half give up 0-200ms in.
func (hw *handWorkers) waitCtx(d time.Duration, rng *rand.Rand) (context.Context, context.CancelFunc) {
	switch {
	case hw.h.cancelEarly.Load() && rng.IntN(2) == 0:
		d = time.Duration(rng.IntN(20000)) * time.Microsecond
	case hw.giveUp.Load() && rng.IntN(2) == 0:
		d = time.Duration(rng.IntN(200000)) * time.Microsecond
	}
	return context.WithTimeout(context.Background(), d)
}

// pause is how long a holder pauses before its Release: in the paused
// holders' phase, one in three for 0.2-1.2 × the ttl.
func (hw *handWorkers) pause(rng *rand.Rand) time.Duration {
	if !hw.pauseHolders.Load() || rng.IntN(3) != 0 {
		return 0
	}
	return safetyTTL/5 + time.Duration(rng.Int64N(int64(safetyTTL)))
}

// grantedSince is the earliest time l's token can have been written to a
// node: the start of its winning attempt (its write-back follows), or,
// for a lock handed over (no attempt of its own), begin, the start of its
// wait. A node killed after that may have taken the token's write-back.
func grantedSince(l *redlock.Lock, begin time.Time) time.Time {
	if a := l.Attempts(); len(a) > 0 {
		return a[len(a)-1].Start
	}
	return begin
}

func handResources(keys []int) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = handKey(k)
	}
	return out
}

// handLost counts an acquire that failed, and after a failure other than
// contention waits a moment (a dead process fails at once).
func handLost(hs *handStats, err error) {
	if errors.Is(err, redlock.ErrResourceLocked) {
		hs.add(func(hs *handCounts) { hs.locked++ })
		return
	}
	hs.add(func(hs *handCounts) { hs.failed++ })
	time.Sleep(2 * time.Millisecond)
}

// plain takes the lock with Acquire, holds it for a short section (and,
// in the paused holders' phase, a pause), and releases it.
func (hw *handWorkers) plain(p *handProc, g int, rl *redlock.Redlock, keys []int, wait time.Duration, rng *rand.Rand, hs *handStats) {
	paused := hw.pause(rng)
	ctx, cancel := hw.waitCtx(wait, rng)
	begin := time.Now()
	l, err := rl.Acquire(ctx, handResources(keys), safetyTTL, redlock.WithRetryCount(-1), redlock.WithFencing(p.fenced))
	cancel()
	p.waited.Add(int64(time.Since(begin)))
	if err != nil {
		p.failed.Add(1)
		handLost(hs, err)
		return
	}
	p.sections.Add(1)
	got := time.Now()
	me := &handHolder{valid: l.Valid}
	bad := hw.w.enter(keys, me)
	tokenBad := l.Token() != 0 && hw.fenced(keys, l.Token(), l.Valid(), fmt.Sprintf("%s/%d (Acquire returned %v before; expires %s)", p.name, g, time.Since(got),
		l.Expiration().Format("15:04:05.000000")), grantedSince(l, begin), hs)
	// A grant with the value of the holder that released last was handed
	// over by it, and expires when that holder's lock would have.
	received, longer := false, false
	if last := hw.w.last[keys[0]].Load(); last != nil && last.value == l.Value() {
		received, longer = true, l.Expiration().After(last.until)
	}
	// A grant of the fair queue with no winning attempt was handed to the
	// waiter by a release, through the nodes' queues.
	queueHanded := false
	if at := l.Attempts(); p.fair && (len(at) == 0 || len(at[len(at)-1].VotesFor) < rl.Quorum()) {
		queueHanded = true
	}
	time.Sleep(time.Duration(200+rng.IntN(500)) * time.Microsecond) // the section
	time.Sleep(paused)                                              // a GC pause, a stopped VM: still inside, by its own account until its validity
	expired := paused > 0 && !l.Valid()
	bad = hw.w.leave(keys, me) || bad
	last := &handLast{value: l.Value(), until: l.Expiration()}
	for _, k := range keys {
		hw.w.last[k].Store(last)
	}
	res, relErr := l.Release(context.Background())
	hs.add(func(hs *handCounts) {
		hs.sections++
		if bad {
			hs.violations++
		}
		if tokenBad {
			hs.tokenViol++
		}
		if l.Token() != 0 {
			hs.fenced++
		}
		if p.fair {
			hs.fair++
		}
		if received {
			hs.received++
		}
		if longer {
			hs.longer++
		}
		if queueHanded {
			hs.queueHanded++
		}
		if paused > 0 {
			hs.paused++
		}
		if expired {
			hs.pausedPast++
		}
		if relErr != nil {
			hs.relFailed++
		} else if res.HandedOver {
			hs.handedOver++
		}
	})
}

// using runs a section under Using: fn records itself against the witness
// as long as its context has not ended.
func (hw *handWorkers) using(p *handProc, g int, rl *redlock.Redlock, keys []int, wait time.Duration, rng *rand.Rand, hs *handStats) {
	ctx, cancel := hw.waitCtx(wait, rng)
	defer cancel()
	ran, bad, tokenBad := false, false, false
	paused := hw.pause(rng)
	begin := time.Now()
	err := rl.Using(ctx, handResources(keys), safetyTTL, func(fctx context.Context) error {
		ran = true
		p.waited.Add(int64(time.Since(begin)))
		p.sections.Add(1)
		me := &handHolder{valid: func() bool { return fctx.Err() == nil }}
		bad = hw.w.enter(keys, me)
		if tok, ok := redlock.TokenFrom(fctx); ok && tok != 0 {
			tokenBad = hw.fenced(keys, tok, fctx.Err() == nil, fmt.Sprintf("%s/%d (Using)", p.name, g), begin, hs) // granted within its wait
		}
		t := time.NewTimer(time.Duration(200+rng.IntN(500))*time.Microsecond + paused)
		select {
		case <-t.C:
		case <-fctx.Done():
		}
		t.Stop()
		bad = hw.w.leave(keys, me) || bad
		for _, k := range keys {
			hw.w.last[k].Store(nil) // its value is the library's
		}
		return nil
	}, redlock.WithRetryCount(-1), redlock.WithAutomaticExtensionThreshold(handThreshold), redlock.WithFencing(p.fenced))
	if !ran {
		p.waited.Add(int64(time.Since(begin)))
		p.failed.Add(1)
		handLost(hs, err)
		return
	}
	hs.add(func(hs *handCounts) {
		hs.sections++
		hs.usingSections++
		if bad {
			hs.violations++
		}
		if tokenBad {
			hs.tokenViol++
		}
		if p.fenced {
			hs.fenced++
		}
		if p.fair {
			hs.fair++
		}
		if paused > 0 {
			hs.paused++
		}
		if err != nil {
			hs.relFailed++
		}
	})
}

// fault runs f on its own goroutine until stopFault.
func (hw *handWorkers) fault(h *harness, f func(h *harness, stop <-chan struct{})) {
	hw.faultStop = make(chan struct{})
	hw.faultWG.Add(1)
	go func() {
		defer hw.faultWG.Done()
		f(h, hw.faultStop)
	}()
}

func (hw *handWorkers) stopFault() {
	close(hw.faultStop)
	hw.faultWG.Wait()
}

// deadHeads puts a ghost waiter first in the fair processes' resource's
// queues on every node every 750ms, and watches whether a release hands it
// the resource; 400ms in, it closes the clients of the killable processes
// under their calls (their waiters stay in the nodes' queues as dead
// heads, their holders cannot release), and replaces them 300ms later.
func (hw *handWorkers) deadHeads(h *harness, stop <-chan struct{}) {
	hs := hw.stats[hw.phase()]
	var killed []*handProc
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var watchers sync.WaitGroup
	defer watchers.Wait()
	for n := 0; ; n++ {
		switch {
		case n%15 == 0:
			key := handKey(1)
			id := fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
			if hw.ghost(h, key, id) {
				hs.add(func(hs *handCounts) { hs.ghosts++ })
				watchers.Add(1)
				go func() {
					defer watchers.Done()
					hw.watchGhost(h, key, id, hs, stop)
				}()
			}
		case n == 8:
			for _, p := range hw.procs {
				if p.killable {
					hw.kill(p)
					killed = append(killed, p)
					hs.add(func(hs *handCounts) { hs.kills++ })
				}
			}
		case n == 14:
			for _, p := range killed {
				hw.open(p)
			}
			killed = nil
		}
		select {
		case <-stop:
			for _, p := range killed { // not yet replaced
				hw.open(p)
			}
			return
		case <-tick.C:
		}
	}
}

// ghost puts the waiter id first in key's queue on every node, with the
// harness's ttl, as a waiter that asked last 600ms ago and then vanished:
// its place lasts 400ms more (a liveness of 1s), and it never asks again.
func (hw *handWorkers) ghost(h *harness, key, id string) bool {
	member := id + ":" + strconv.FormatInt(safetyTTL.Milliseconds(), 10)
	for _, c := range h.Peek {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		now := time.Now().UnixMilli()
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, fairQueue(key), redis.Z{Score: float64(now - 60000), Member: member})
			p.ZAdd(ctx, fairLive(key), redis.Z{Score: float64(now + handGhostLive.Milliseconds()), Member: member})
			return nil
		})
		cancel()
		if err != nil {
			hw.fail(fmt.Errorf("ghost in %s's queue: %w", key, err))
			return false
		}
	}
	return true
}

// watchGhost polls every node for a ghost's id as key's value until the
// ghost's liveness ran out and its resource expired (or stop): a release
// handed the resource to a dead head.
func (hw *handWorkers) watchGhost(h *harness, key, id string, hs *handStats, stop <-chan struct{}) {
	end := time.Now().Add(handGhostLive + safetyTTL)
	seen := map[int]bool{}
	most := 0
	for time.Now().Before(end) {
		holding := 0
		for i, c := range h.Peek {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			v, err := c.Get(ctx, key).Result()
			cancel()
			if err == nil && v == id {
				seen[i] = true
				holding++
			}
		}
		most = max(most, holding)
		select {
		case <-stop:
			end = time.Time{}
		case <-time.After(5 * time.Millisecond):
		}
	}
	if len(seen) > 0 {
		hs.add(func(hs *handCounts) {
			hs.ghostsHanded++
			if most >= safetyNodes/2+1 {
				hs.ghostsQuorum++
			}
		})
	}
}

// kill closes p's clients under its calls: its waiters can neither ask
// again nor leave the queues, its holders cannot release. Its Redlock is
// closed in the background.
func (hw *handWorkers) kill(p *handProc) {
	p.mu.Lock()
	rl, cs := p.rl, p.clients
	p.dead = true
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	hw.closing.Add(1)
	go func() {
		defer hw.closing.Done()
		_ = rl.Close()
	}()
}

// missingQueues deletes both resources' queues on one of nodes 0-3 (in
// turn) every 100ms, while node 4 is stopped (SIGSTOP) 300ms in every
// 600ms: waiters queue on a quorum without it, and find it behind when it
// resumes.
func (hw *handWorkers) missingQueues(h *harness, stop <-chan struct{}) {
	hs := hw.stats[hw.phase()]
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	stopped := false
	defer func() {
		if stopped {
			h.Nodes[safetyNodes-1].Resume()
		}
	}()
	for n := 0; ; n++ {
		switch n % 6 {
		case 0:
			h.Nodes[safetyNodes-1].Pause()
			stopped = true
			hs.add(func(hs *handCounts) { hs.stops++ })
		case 3:
			h.Nodes[safetyNodes-1].Resume()
			stopped = false
		}
		c := h.Peek[n%(safetyNodes-1)]
		for k := range handKeys {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if d, err := c.Del(ctx, fairQueue(handKey(k)), fairLive(handKey(k))).Result(); err == nil && d > 0 {
				hs.add(func(hs *handCounts) { hs.queuesDeleted++ })
			}
			cancel()
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// fairLive is the key of resource key's waiters' deadlines (a resource
// without a hash tag is its own).
func fairLive(key string) string { return "redlock:qlive:{" + key + "}:" + key }

// end stops the workers, closes every process, and returns what kept them
// from starting.
func (hw *handWorkers) end() []error {
	close(hw.stop)
	hw.wg.Wait()
	hw.closing.Wait()
	for _, p := range hw.procs {
		p.mu.Lock()
		if p.rl != nil && !p.dead {
			_ = p.rl.Close()
			for _, c := range p.clients {
				_ = c.Close()
			}
		}
		p.mu.Unlock()
	}
	return hw.errs
}

// totals returns the sums over every phase, and over the hand-over phases
// alone (the last len(handOverPhases)).
func (hw *handWorkers) totals() (all, own handCounts) {
	for i, hs := range hw.stats {
		hs.mu.Lock()
		all.plus(&hs.handCounts)
		if i >= len(hw.stats)-len(handOverPhases) {
			own.plus(&hs.handCounts)
		}
		hs.mu.Unlock()
	}
	return all, own
}

// plus adds o to c.
func (c *handCounts) plus(o *handCounts) {
	c.sections += o.sections
	c.usingSections += o.usingSections
	c.fenced += o.fenced
	c.fair += o.fair
	c.violations += o.violations
	c.tokenViol += o.tokenViol
	c.staleTokens += o.staleTokens
	c.afterLoss += o.afterLoss
	c.handedOver += o.handedOver
	c.received += o.received
	c.longer += o.longer
	c.queueHanded += o.queueHanded
	c.locked += o.locked
	c.failed += o.failed
	c.relFailed += o.relFailed
	c.paused += o.paused
	c.pausedPast += o.pausedPast
	c.ghosts += o.ghosts
	c.ghostsHanded += o.ghostsHanded
	c.ghostsQuorum += o.ghostsQuorum
	c.kills += o.kills
	c.queuesDeleted += o.queuesDeleted
	c.stops += o.stops
}

// table formats the figures per phase, as Markdown.
func (hw *handWorkers) table(names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d processes × 3 goroutines (%s), %d resources, ttl %v, waits up to %v\n\n", len(hw.procs), hw.procNames(), handKeys, safetyTTL, handWaitMax)
	b.WriteString("| fault phase | sections | under Using | fenced | fair | violations | token violations (stale; after a node's data loss) | handed over (Release) | received by hand-over (validity lengthened) | fair, handed by the queue " +
		"| lost to contention | lost to faults | failed releases | paused holders (past their validity) | ghosts (handed one) | processes killed | queues deleted | node stops |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	row := func(name string, hs *handCounts) {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d (%d; %d) | %d | %d (%d) | %d | %d | %d | %d | %d (%d) | %d (%d) | %d | %d | %d |\n", name, hs.sections, hs.usingSections, hs.fenced, hs.fair,
			hs.violations, hs.tokenViol, hs.staleTokens, hs.afterLoss, hs.handedOver, hs.received, hs.longer, hs.queueHanded, hs.locked, hs.failed, hs.relFailed, hs.paused, hs.pausedPast,
			hs.ghosts, hs.ghostsHanded, hs.kills, hs.queuesDeleted, hs.stops)
	}
	for i, hs := range hw.stats {
		hs.mu.Lock()
		row(names[i], &hs.handCounts)
		hs.mu.Unlock()
	}
	all, own := hw.totals()
	row("**the hand-over phases**", &own)
	row("**all**", &all)
	fmt.Fprintf(&b, "\nGhosts handed a resource on a quorum of nodes: %d of %d handed one.\n", all.ghostsQuorum, all.ghostsHanded)
	for _, n := range hw.notes {
		fmt.Fprintf(&b, "Token at or below: %s\n", n)
	}
	b.WriteString("Per process (sections, failed acquires, mean acquire):")
	for _, p := range hw.procs {
		n := p.sections.Load() + p.failed.Load()
		fmt.Fprintf(&b, " %s %d, %d, %v;", p.name, p.sections.Load(), p.failed.Load(), (time.Duration(p.waited.Load()) / time.Duration(max(n, 1))).Round(100*time.Microsecond))
	}
	b.WriteString("\n")
	return b.String()
}

func (hw *handWorkers) procNames() string {
	var s []string
	for _, p := range hw.procs {
		s = append(s, p.name)
	}
	return strings.Join(s, ", ")
}
