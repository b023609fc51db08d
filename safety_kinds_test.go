package redlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// The semaphore and read-write part of TestSafety. Beside the lock workers,
// under the same fault schedule, workers in Redlocks of their own take one
// of safetyPermits permits of one resource (WithPermits), and others take
// shared or exclusive locks of another (WithShared), each holding it for a
// short critical section. A witness counts, as the lock workers' does, the
// holders whose lock is still valid by its own account: a permit holder
// that enters beside safetyPermits others is over the bound; a writer
// beside anyone, or a reader beside a writer, is a read-write violation.
// It must count none.

const (
	safetyPermits       = 2
	safetyPermitWorkers = 8
	safetyRWWorkers     = 5 // each writes one time in four
)

// kindHolder is one holder in the kinds witness.
type kindHolder struct {
	lock   *redlock.Lock
	writer bool
}

// kindsWitness is who holds the semaphore and the read-write resource.
type kindsWitness struct {
	mu      sync.Mutex
	permits map[*kindHolder]bool
	rw      map[*kindHolder]bool
}

// breaks reports whether h beside the valid holders in set breaks the
// bound (permits: more than safetyPermits; rw: a writer beside anyone).
func breaks(set map[*kindHolder]bool, h *kindHolder, permits bool) bool {
	valid, writers := 0, 0
	for o := range set {
		if o == h || !o.lock.Valid() {
			continue
		}
		valid++
		if o.writer {
			writers++
		}
	}
	if permits {
		return valid >= safetyPermits
	}
	return writers > 0 || h.writer && valid > 0
}

// kindStats are the figures of one phase.
type kindStats struct {
	mu                      sync.Mutex
	permitSections, overN   int
	peak                    int
	reads, writes, rwBreaks int
	permitLocked, rwLocked  int
	permitFailed, rwFailed  int
	writerWaits             []time.Duration
}

// kinds runs the workers until stop; phase says which phase runs.
type kinds struct {
	stats []*kindStats
	wg    sync.WaitGroup
	stop  chan struct{}
	errs  []error
}

// startKinds starts the workers on h's proxies, each reached through a
// proxy of its own that delays node i by i × 0.75 ms each way: the workers
// reach the nodes in orders that differ from node to node, as they would
// from hosts at different distances, which is what splits a semaphore's
// contenders. (A mutant that grants on per-node counts is caught by
// TestPermitsBoundWithSkewedNodes, whose contenders hold longer and more
// often side by side; at this harness's throughput it was not seen in two
// rounds.)
func startKinds(tb testing.TB, h *harness, phases int, phase func() int) *kinds {
	k := &kinds{stats: make([]*kindStats, phases), stop: make(chan struct{})}
	for i := range k.stats {
		k.stats[i] = &kindStats{}
	}
	var addrs []string
	for i, p := range h.Proxies {
		skew := redistest.NewProxy(tb, p.Addr())
		d := time.Duration(i) * 750 * time.Microsecond
		skew.SetLatency(d, d)
		addrs = append(addrs, skew.Addr())
	}
	w := &kindsWitness{permits: map[*kindHolder]bool{}, rw: map[*kindHolder]bool{}}
	for i := range safetyPermitWorkers + safetyRWWorkers {
		var cs []redis.UniversalClient
		for _, a := range addrs {
			cs = append(cs, redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
				ReadTimeout: time.Second, PoolSize: 4}))
		}
		rl, err := redlock.New(cs, redlock.WithNodeTimeout(100*time.Millisecond),
			redlock.WithRetryCount(3), redlock.WithRetryDelay(5*time.Millisecond), redlock.WithRetryJitter(5*time.Millisecond))
		if err != nil {
			k.errs = append(k.errs, err)
			continue
		}
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			defer func() {
				_ = rl.Close()
				for _, c := range cs {
					_ = c.Close()
				}
			}()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for {
				select {
				case <-k.stop:
					return
				default:
				}
				ks := k.stats[phase()]
				if i < safetyPermitWorkers {
					k.permit(h, rl, rng, w, ks)
				} else {
					k.readWrite(h, rl, rng, w, ks)
				}
			}
		}()
	}
	return k
}

// acquireCtx is the ctx of one acquire: in the cancelling phase, half the
// callers cancel 0-20ms in.
func acquireCtx(h *harness, rng *rand.Rand) (context.Context, context.CancelFunc) {
	if rng.IntN(2) == 0 && h.cancelEarly.Load() {
		return context.WithTimeout(context.Background(), time.Duration(rng.IntN(20000))*time.Microsecond)
	}
	return context.Background(), func() {}
}

// permit takes a permit, holds it for a short section, releases it.
func (k *kinds) permit(h *harness, rl *redlock.Redlock, rng *rand.Rand, w *kindsWitness, ks *kindStats) {
	// Contenders wait for a permit (woken by each release, all at once:
	// the herd that splits the nodes), up to 300ms.
	ctx, cancel := acquireCtx(h, rng)
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	l, err := rl.Acquire(wctx, []string{"{safety}sem"}, safetyTTL, redlock.WithPermits(safetyPermits), redlock.WithRetryCount(-1))
	wcancel()
	cancel()
	if err != nil {
		ks.mu.Lock()
		if errors.Is(err, redlock.ErrResourceLocked) {
			ks.permitLocked++
		} else {
			ks.permitFailed++
		}
		ks.mu.Unlock()
		return
	}
	me := &kindHolder{lock: l}
	over := w.enter(w.permits, me, true)
	time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Microsecond) // the section
	over = w.check(w.permits, me, true) || over
	w.mu.Lock()
	n := 0
	for o := range w.permits {
		if o.lock.Valid() {
			n++
		}
	}
	delete(w.permits, me)
	w.mu.Unlock()
	_, _ = l.Release(context.Background())
	ks.mu.Lock()
	ks.permitSections++
	ks.peak = max(ks.peak, n)
	if over {
		ks.overN++
	}
	ks.mu.Unlock()
}

// readWrite takes a shared lock (or, one time in four, the exclusive
// lock), holds it for a short section, releases it.
func (k *kinds) readWrite(h *harness, rl *redlock.Redlock, rng *rand.Rand, w *kindsWitness, ks *kindStats) {
	writer := rng.IntN(4) == 0
	ctx, cancel := acquireCtx(h, rng)
	begin := time.Now()
	l, err := rl.Acquire(ctx, []string{"{safety}rw"}, safetyTTL, redlock.WithShared(!writer))
	cancel()
	if err != nil {
		ks.mu.Lock()
		if errors.Is(err, redlock.ErrResourceLocked) {
			ks.rwLocked++
		} else {
			ks.rwFailed++
		}
		ks.mu.Unlock()
		return
	}
	waited := time.Since(begin)
	me := &kindHolder{lock: l, writer: writer}
	bad := w.enter(w.rw, me, false)
	time.Sleep(time.Duration(100+rng.IntN(400)) * time.Microsecond)
	bad = w.check(w.rw, me, false) || bad
	w.mu.Lock()
	delete(w.rw, me)
	w.mu.Unlock()
	_, _ = l.Release(context.Background())
	ks.mu.Lock()
	if writer {
		ks.writes++
		ks.writerWaits = append(ks.writerWaits, waited)
	} else {
		ks.reads++
	}
	if bad {
		ks.rwBreaks++
	}
	ks.mu.Unlock()
}

// enter adds h to set and reports whether it broke the bound.
func (w *kindsWitness) enter(set map[*kindHolder]bool, h *kindHolder, permits bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := h.lock.Valid() && breaks(set, h, permits)
	set[h] = true
	return bad
}

// check reports whether h, still valid at the end of its section, is
// beside holders that break the bound.
func (w *kindsWitness) check(set map[*kindHolder]bool, h *kindHolder, permits bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return h.lock.Valid() && breaks(set, h, permits)
}

// end stops the workers and returns what kept them from starting.
func (k *kinds) end() []error {
	close(k.stop)
	k.wg.Wait()
	return k.errs
}

// totals returns the sums over every phase.
func (k *kinds) totals() (permitSections, overN, reads, writes, rwBreaks int) {
	for _, ks := range k.stats {
		permitSections += ks.permitSections
		overN += ks.overN
		reads += ks.reads
		writes += ks.writes
		rwBreaks += ks.rwBreaks
	}
	return
}

// table formats the figures per phase, as Markdown.
func (k *kinds) table(names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| fault phase | permit sections (n=%d) | peak holders | over the bound | reads | writes | read-write violations | writer wait p99 |\n", safetyPermits)
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for i, ks := range k.stats {
		p99 := time.Duration(0)
		if len(ks.writerWaits) > 0 {
			p99 = percentile(ks.writerWaits, 0.99)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %v |\n", names[i], ks.permitSections, ks.peak, ks.overN,
			ks.reads, ks.writes, ks.rwBreaks, p99.Round(100*time.Microsecond))
	}
	ps, over, r, wr, rb := k.totals()
	fmt.Fprintf(&b, "| **all** | %d | | %d | %d | %d | %d | |\n", ps, over, r, wr, rb)
	return b.String()
}

var safetyKindRounds = flag.Int("safety.kinds.rounds", 1, "rounds of the fault schedule TestSafetyKinds runs (1 in the suite; RELIABILITY.md figures: 2, .ci/run's safety step)")

// TestSafetyKinds runs the semaphore and read-write workers, and the
// contended hand-over workers (safety_handover_test.go), through the fault
// schedule and then the hand-over phases, safetyKindRounds times, and
// counts what the witnesses see. It must count no holder over the bound,
// no writer beside anyone, no two holders of a lock at once and no token
// out of order; and the hand-over phases must hand locks over.
//
//	go test -run '^TestSafetyKinds$' -count=1 -v . -safety.kinds.rounds 10
func TestSafetyKinds(t *testing.T) {
	redistest.Require(t)
	h := &harness{Fixture: redistest.New(t, redistest.Setup{Nodes: safetyNodes, Proxied: true})}
	phases := append(slices.Clone(schedule), handOverPhases...)
	var current atomic.Int32
	phase := func() int { return int(current.Load()) }
	hw := startHandOver(h, len(phases), phase)
	k := startKinds(t, h, len(phases), phase)
	for range *safetyKindRounds {
		for i, p := range phases {
			current.Store(int32(i))
			if p.start != nil {
				p.start(h)
			}
			time.Sleep(phaseLength)
			if p.end != nil {
				p.end(h)
			}
		}
	}
	for _, err := range k.end() {
		t.Error(err)
	}
	for _, err := range hw.end() {
		t.Error(err)
	}
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = p.name
	}
	t.Log("\n" + k.table(names))
	t.Log("\n" + hw.table(names))
	permits, over, reads, writes, rw := k.totals()
	assert.Zero(t, over, "permit holders over the bound of %d", safetyPermits)
	assert.Zero(t, rw, "read-write violations")
	assert.NotZero(t, permits, "permit sections")
	assert.NotZero(t, reads, "shared sections")
	assert.NotZero(t, writes, "exclusive sections")

	all, own := hw.totals()
	assert.Zero(t, all.violations, "mutual-exclusion violations of the hand-over workers")
	assert.Zero(t, all.tokenViol, "fencing-token violations of the hand-over workers")
	assert.Zero(t, all.longer, "hand-overs whose receiver's lock expires after the releaser's would have")
	assert.NotZero(t, all.usingSections, "hand-over workers' sections under Using")
	assert.NotZero(t, all.fenced, "hand-over workers' fenced sections")
	assert.NotZero(t, all.fair, "hand-over workers' sections of the fair queue")
	if *safetyKindRounds > 0 {
		// Every phase runs sections; hand-overs are coverage, not a
		// promise: a phase whose faults fail most attempts may hand none
		// over (CI's -race pass drew 13 sections and 0 hand-overs with a
		// node stopped half the time), so they are counted over the phases.
		handed := 0
		for i, p := range handOverPhases {
			hs := hw.stats[len(schedule)+i]
			assert.NotZero(t, hs.sections, "sections in phase %q", p.name)
			handed += hs.handedOver
		}
		assert.NotZero(t, handed, "Releases that handed over in the hand-over phases")
		assert.NotZero(t, own.received, "grants received by a hand-over in the hand-over phases")
		assert.NotZero(t, own.ghosts, "ghost waiters put first in the queues")
	}
}
