package redlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

var (
	safetySections = flag.Int("safety.sections", 2000, "critical sections the safety harness runs (RELIABILITY.md figures: 20000 in .ci/run, 200000 at full size)")
	safetyReport   = flag.String("safety.report", "", "write the safety harness's figures to this file")
)

// phase is one step of the fault schedule: what it does to the proxies and
// nodes when it starts, and undoes when it ends. Every phase keeps the faulty
// nodes a minority (at most 2 of 5), which is what Redlock claims to survive.
type phase struct {
	name  string
	start func(h *harness)
	end   func(h *harness)
}

// The schedule. A killed node is restarted (with its data lost) only after
// the longest ttl in use has passed: the delayed-restart rule.
var schedule = []phase{
	{name: "healthy"},
	{name: "1 node hung (requests applied, replies lost)",
		start: func(h *harness) { h.Proxies[0].Set(redistest.DropReplies) },
		end:   func(h *harness) { h.Proxies[0].Heal() }},
	{name: "2 nodes slow (+20ms each way)",
		start: func(h *harness) {
			h.Proxies[1].SetLatency(20*time.Millisecond, 20*time.Millisecond)
			h.Proxies[2].SetLatency(20*time.Millisecond, 20*time.Millisecond)
		},
		end: func(h *harness) { h.Proxies[1].Heal(); h.Proxies[2].Heal() }},
	{name: "2 nodes partitioned",
		start: func(h *harness) { h.Proxies[3].Set(redistest.Partition); h.Proxies[4].Set(redistest.Partition) },
		end:   func(h *harness) { h.Proxies[3].Heal(); h.Proxies[4].Heal() }},
	{name: "1 node refusing, 1 node's connections cut every 50ms",
		start: func(h *harness) {
			h.Proxies[4].Set(redistest.Refuse)
			h.cutter(h.Proxies[0], 50*time.Millisecond)
		},
		end: func(h *harness) { h.stopCutter(); h.Proxies[4].Heal() }},
	{name: "1 node killed, restarted empty after the max ttl",
		start: func(h *harness) {
			h.Nodes[2].Kill()
			h.restartAfter(h.Nodes[2], safetyTTL+100*time.Millisecond)
		},
		end: func(h *harness) { h.waitRestart() }},
	{name: "rolling restart: each node in turn killed, back empty after the max ttl + 100ms",
		start: func(h *harness) { h.rollingRestart(safetyTTL + 100*time.Millisecond) },
		end:   func(h *harness) { h.waitRestart() }},
	{name: "2 nodes slow (+30ms each way), half the callers cancel 0-20ms in",
		start: func(h *harness) {
			h.Proxies[0].SetLatency(30*time.Millisecond, 30*time.Millisecond)
			h.Proxies[2].SetLatency(30*time.Millisecond, 30*time.Millisecond)
			h.cancelEarly.Store(true)
		},
		end: func(h *harness) { h.cancelEarly.Store(false); h.Proxies[0].Heal(); h.Proxies[2].Heal() }},
	{name: "force releases and retakes (the lost-lock workers' resources, every 40ms)"},
	{name: "nodes lose keys (a lost-lock worker's key deleted on 3 of 5 nodes, every 250ms)"},
	{name: "1 node hung, 1 node slow (+50ms one way)",
		start: func(h *harness) {
			h.Proxies[1].Set(redistest.DropReplies)
			h.Proxies[3].SetLatency(50*time.Millisecond, 0)
		},
		end: func(h *harness) { h.Proxies[1].Heal(); h.Proxies[3].Heal() }},
}

const (
	safetyNodes   = 5
	safetyWorkers = 8
	safetyKeys    = 4
	safetyTTL     = 500 * time.Millisecond
	phaseLength   = 1500 * time.Millisecond
)

// harness holds the nodes, their proxies and the fault machinery.
type harness struct {
	*redistest.Fixture // each worker has clients of its own to the proxies

	cutStop chan struct{}
	cutDone chan struct{}
	restart chan struct{}
	// cancelEarly makes the even workers acquire with a ctx that ends 0-20ms
	// in: a call cut short while its writes may still land.
	cancelEarly atomic.Bool
	// hand is TestSafetyKinds' hand-over workers, whose phases
	// (handOverPhases) drive their faults; nil in TestSafety.
	hand *handWorkers
	// kills are the nodes killed and restarted empty (restartAfter,
	// rollingRestart): each lost its fencing counters at its kill.
	killsMu sync.Mutex
	kills   []*nodeLoss
}

// nodeLoss is one node's kill and its restart, in Unix ns (restarted is 0
// while the node is down).
type nodeLoss struct{ killed, restarted int64 }

// killed records a node's kill, now; restarted(l) records its restart,
// called as it begins (the node may vote before Restart returns, which
// waits for it: a CI run saw a vote 90ms before that).
func (h *harness) killed() *nodeLoss {
	l := &nodeLoss{killed: time.Now().UnixNano()}
	h.killsMu.Lock()
	h.kills = append(h.kills, l)
	h.killsMu.Unlock()
	return l
}

func (h *harness) restarted(l *nodeLoss) {
	h.killsMu.Lock()
	l.restarted = time.Now().UnixNano()
	h.killsMu.Unlock()
}

// lostSince reports whether a node was killed after at (Unix ns) and has
// come back empty since: a token that entered at at may have been written
// to a bare quorum that node was part of, so a token at or below it after
// that is the documented limit (RELIABILITY.md, "Tokens and data loss"),
// not a violation. A node already down at at was not part of at's quorum.
func (h *harness) lostSince(at int64) bool {
	h.killsMu.Lock()
	defer h.killsMu.Unlock()
	for _, l := range h.kills {
		if l.killed > at && l.restarted != 0 {
			return true
		}
	}
	return false
}

func (h *harness) cutter(p *redistest.Proxy, every time.Duration) {
	h.cutStop, h.cutDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.cutDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-h.cutStop:
				return
			case <-t.C:
				p.Cut()
			}
		}
	}()
}

func (h *harness) stopCutter() { close(h.cutStop); <-h.cutDone }

func (h *harness) restartAfter(nd *redistest.Node, d time.Duration) {
	l := h.killed()
	h.restart = make(chan struct{})
	go func() {
		defer close(h.restart)
		time.Sleep(d)
		h.restarted(l) // before: the node answers before Restart returns
		nd.Restart()
	}()
}

// rollingRestart restarts every node in turn, as an operator upgrading
// them does: each killed, kept down for down (past the longest ttl: the
// delayed-restart rule), started again empty, and left up for 150ms before
// the next goes down. At most one node is down at a time. Each kill is
// recorded (lostSince): every node loses its fencing counters in turn.
func (h *harness) rollingRestart(down time.Duration) {
	h.restart = make(chan struct{})
	go func() {
		defer close(h.restart)
		for _, nd := range h.Nodes {
			nd.Kill()
			l := h.killed()
			time.Sleep(down)
			h.restarted(l) // before: the node answers before Restart returns
			nd.Restart()
			time.Sleep(150 * time.Millisecond)
		}
	}()
}

func (h *harness) waitRestart() { <-h.restart }

// process makes a Redlock as another process would have one: its own
// clients, through the proxies, with the lock workers' options and opts.
func (h *harness) process(opts ...redlock.Option) (*redlock.Redlock, []*redis.Client, error) {
	var cs []redis.UniversalClient
	var own []*redis.Client
	for _, p := range h.Proxies {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
			ReadTimeout: time.Second, PoolSize: 4})
		cs = append(cs, c)
		own = append(own, c)
	}
	rl, err := redlock.New(cs, append([]redlock.Option{redlock.WithNodeTimeout(100 * time.Millisecond),
		redlock.WithRetryCount(3), redlock.WithRetryDelay(5 * time.Millisecond), redlock.WithRetryJitter(5 * time.Millisecond)}, opts...)...)
	if err != nil {
		for _, c := range own {
			_ = c.Close()
		}
		return nil, nil, err
	}
	return rl, own, nil
}

// phaseStats are the figures of one phase.
type phaseStats struct {
	mu         sync.Mutex
	sections   int
	violations int
	locked     int // acquires lost to contention
	failed     int // acquires lost to node failures (or cut short by their ctx)
	relFailed  int // releases that failed
	fenced     int // critical sections under a fenced lock
	tokenViol  int // fenced sections that started with a token at or below one that started before
	handoffs   int
	latencies  []time.Duration // of successful acquires

	// The elections' (safety_election_test.go), by the phase a term began in.
	terms         int             // terms granted
	termOverlaps  int             // a leader entered fn while another's term was live
	overlapNotes  []string        // each overlap's account: both leaders' calls
	termOrder     int             // a leader entered with a term number at or below one that entered before
	termsLost     int             // terms whose context ended with ErrExtensionFailed
	cutOff        int             // leaders cut off from every node
	cutNotEnded   int             // cut-off leaders whose term's context did not end within cutOffBound
	lossMargins   []time.Duration // lost terms: their validity's end minus their context's end
	successorGaps []time.Duration // after a lost term: the next term's start minus the lost one's context's end

	// The lost-lock workers' (safety_lost_test.go).
	lostSections     int
	forceReleases    int
	forcedOverlaps   []time.Duration // after a force release: the old section's end minus the new one's start
	heardLate        int             // of those, past heardWithin
	keyLosses        int
	lossOverlaps     []time.Duration // after a key loss: the same
	lossPastValidity int             // of those, past the lock's validity
	wonAfterLoss     int             // extensions that won, begun after their keys were lost on a majority
	lostViolations   int             // two holders inside with no force release or loss between
}

// TestSafety runs W workers, each with its own Redlock and its own clients
// (as separate processes would have), contending for a few resources with a
// short critical section while the fault schedule runs. An in-process
// witness counts two holders inside one resource's critical section at once.
// It must count none. Half the workers lock with fencing tokens, and a token
// witness counts fenced sections that start with a token at or below one
// that started before them on the same resource. It must count none too.
// Beside the workers, candidates in Redlocks of their own campaign for two
// elections (safety_election_test.go): a witness counts two leaders of one
// election at once, and terms that do not grow in the order their leaders
// began. It must count neither.
//
//	go test -run TestSafety -count=1 . -safety.sections 20000 -safety.report /tmp/safety.txt
func TestSafety(t *testing.T) {
	redistest.Require(t)
	h := &harness{Fixture: redistest.New(t, redistest.Setup{Nodes: safetyNodes, Proxied: true})}
	rls := make([]*redlock.Redlock, safetyWorkers)
	for w := range rls {
		rl, cs, err := h.process()
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = rl.Close()
			for _, c := range cs {
				_ = c.Close()
			}
		})
		rls[w] = rl
	}

	target := *safetySections
	stats := make([]*phaseStats, len(schedule))
	for i := range stats {
		stats[i] = &phaseStats{}
	}
	var current atomic.Int32 // index of the running phase
	var total atomic.Int64
	stop := make(chan struct{})

	// The witness: who is inside each resource's critical section.
	type holder struct {
		worker int
		lock   *redlock.Lock
	}
	var inside [safetyKeys]atomic.Pointer[holder]
	var last [safetyKeys]atomic.Int32      // the worker that held it last
	var topToken [safetyKeys]atomic.Uint64 // the highest token that started a section
	var topAt [safetyKeys]atomic.Int64     // when it did (Unix ns)
	var afterLoss atomic.Int32             // token violations after a node lost its counters (not counted)

	var wg sync.WaitGroup
	for w := range safetyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			ctx := context.Background()
			for total.Load() < int64(target) {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(safetyKeys)
				ps := stats[current.Load()]
				begin := time.Now()
				actx, cancel := ctx, context.CancelFunc(func() {})
				if w%2 == 0 && h.cancelEarly.Load() {
					actx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(20000))*time.Microsecond)
				}
				lock, err := rls[w].Acquire(actx, []string{fmt.Sprintf("{safety}%d", k)}, safetyTTL, redlock.WithFencing(w < safetyWorkers/2))
				cancel()
				took := time.Since(begin)
				if err != nil {
					ps.mu.Lock()
					if errors.Is(err, redlock.ErrResourceLocked) {
						ps.locked++
					} else {
						ps.failed++
					}
					ps.mu.Unlock()
					continue
				}
				me := &holder{worker: w, lock: lock}
				violation := false
				// Another holder inside, whose lock is still valid by its
				// own account, is two holders at once.
				if prev := inside[k].Swap(me); prev != nil && prev.lock.Valid() {
					violation = true
				}
				tokenViolation := false
				if tok := lock.Token(); tok != 0 {
					for {
						top, at := topToken[k].Load(), topAt[k].Load()
						if tok <= top {
							// The documented limit (RELIABILITY.md, "Tokens
							// and data loss"): the top token's write-back
							// reached a bare quorum, one of whose nodes was
							// killed and came back empty since. The witness
							// starts again from this token, so that the
							// tokens after it are still checked.
							if h.lostSince(at) {
								afterLoss.Add(1)
								if !topToken[k].CompareAndSwap(top, tok) {
									continue
								}
								topAt[k].Store(grantedSince(lock, begin).UnixNano())
							} else {
								tokenViolation = true
							}
							break
						}
						if topToken[k].CompareAndSwap(top, tok) {
							topAt[k].Store(grantedSince(lock, begin).UnixNano()) // no node took its write-back before
							break
						}
					}
				}
				for range 3 {
					time.Sleep(50 * time.Microsecond) // the critical section
				}
				if cur := inside[k].Load(); cur != me && cur != nil && cur.lock.Valid() && lock.Valid() {
					violation = true
				}
				inside[k].CompareAndSwap(me, nil)
				handoff := last[k].Swap(int32(w)) != int32(w)
				_, relErr := lock.Release(ctx)
				total.Add(1)
				ps.mu.Lock()
				ps.sections++
				ps.latencies = append(ps.latencies, took)
				if violation {
					ps.violations++
				}
				if lock.Token() != 0 {
					ps.fenced++
				}
				if tokenViolation {
					ps.tokenViol++
				}
				if handoff {
					ps.handoffs++
				}
				if relErr != nil {
					ps.relFailed++
				}
				ps.mu.Unlock()
			}
		}()
	}

	// The candidates of the elections run beside the workers, until they
	// are done.
	el := startElections(h, func() *phaseStats { return stats[current.Load()] })
	lr := startLost(h, func() *phaseStats { return stats[current.Load()] })

	// The fault schedule runs until the workers have done their sections.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.After(10 * time.Minute)
	for i := 0; ; i++ {
		p := schedule[i%len(schedule)]
		current.Store(int32(i % len(schedule)))
		if p.start != nil {
			p.start(h)
		}
		el.phaseBegins(i)
		lr.phaseBegins(i)
		timer := time.NewTimer(phaseLength)
		finished := false
		select {
		case <-timer.C:
		case <-done:
			finished = true
		case <-deadline:
			close(stop)
			<-done
			finished = true
			t.Errorf("the harness did not finish %d sections within 10 minutes (did %d)", target, total.Load())
		}
		timer.Stop()
		if p.end != nil {
			p.end(h)
		}
		if finished {
			break
		}
	}
	for _, err := range el.stop() {
		t.Error(err)
	}
	for _, err := range lr.stop() {
		t.Error(err)
	}

	report := safetyTable(stats, target) + lostTable(stats)
	t.Log("\n" + report)
	if *safetyReport != "" {
		require.NoError(t, os.WriteFile(*safetyReport, []byte(report), 0o644))
	}
	violations, tokenViolations, fencedSections := 0, 0, 0
	terms, overlaps, termOrder, lost, cutNotEnded := 0, 0, 0, 0, 0
	for i, ps := range stats {
		violations += ps.violations
		tokenViolations += ps.tokenViol
		fencedSections += ps.fenced
		terms += ps.terms
		overlaps += ps.termOverlaps
		termOrder += ps.termOrder
		lost += ps.termsLost
		cutNotEnded += ps.cutNotEnded
		if ps.sections == 0 && target >= 20000 {
			t.Errorf("phase %q ran no critical section", schedule[i].name)
		}
		if ps.terms == 0 && target >= 20000 {
			t.Errorf("phase %q granted no term", schedule[i].name)
		}
	}
	heardLate, wonAfterLoss, pastValidity, lostViolations, forced, losses := 0, 0, 0, 0, 0, 0
	for _, ps := range stats {
		heardLate += ps.heardLate
		wonAfterLoss += ps.wonAfterLoss
		pastValidity += ps.lossPastValidity
		lostViolations += ps.lostViolations
		forced += ps.forceReleases
		losses += ps.keyLosses
	}
	assert.Zero(t, heardLate, "old holders whose section ran more than %v after another took their force-released lock", heardWithin)
	assert.Zero(t, wonAfterLoss, "extensions that won without a quorum that held the value (begun after a majority lost the key)")
	assert.Zero(t, pastValidity, "old holders whose section ran past the lock's validity after a majority lost the key")
	assert.Zero(t, lostViolations, "lost-lock workers: two holders at once with no force release or key loss between")
	if target >= 20000 {
		assert.NotZero(t, forced, "force releases")
		assert.NotZero(t, losses, "key losses")
	}
	assert.Zero(t, violations, "mutual-exclusion violations")
	assert.Zero(t, tokenViolations, "fencing-token violations")
	t.Logf("tokens at or below one granted before a node was killed and came back empty (RELIABILITY.md, \"Tokens and data loss\"; not counted above): %d; terms so: %d", afterLoss.Load(), el.afterLoss.Load())
	assert.Greater(t, fencedSections, target/4, "fenced critical sections")
	assert.GreaterOrEqual(t, total.Load(), int64(target))
	if !assert.Zero(t, overlaps, "leader overlaps (two leaders of one election at once)") {
		for _, ps := range stats {
			for _, n := range ps.overlapNotes {
				t.Log(n)
			}
		}
	}
	assert.Zero(t, termOrder, "term-order violations")
	assert.Zero(t, cutNotEnded, "cut-off leaders whose term's context did not end within %v", cutOffBound)
	if target >= 20000 {
		assert.Greater(t, terms, target/100, "terms granted")
		assert.NotZero(t, lost, "terms lost (the cut-off leaders')")
	}
}

// safetyTable formats the figures as a Markdown table.
func safetyTable(stats []*phaseStats, target int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes, %d workers (separate Redlocks, %d of them fenced), %d resources, ttl %v, node timeout 100ms, target %d sections\n\n",
		safetyNodes, safetyWorkers, safetyWorkers/2, safetyKeys, safetyTTL, target)
	fmt.Fprintf(&b, "%d elections, %d candidates each (separate Redlocks; Lead or Campaign and Resign), term ttl %v, extension threshold %v; once a phase one leader is cut off from every node\n\n",
		safetyElections, safetyCandidates, termTTL, termThreshold)
	b.WriteString("| fault phase | critical sections | violations | fenced sections | token violations | hand-offs | lost to contention | lost to faults | failed releases | acquire p50 | p99 | max " +
		"| terms | term overlaps | term-order violations | leaders cut off | terms lost |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var all phaseStats
	for i, ps := range stats {
		ps.mu.Lock()
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %d | %d | %d | %d | %d |\n", schedule[i].name, ps.sections, ps.violations, ps.fenced, ps.tokenViol,
			ps.handoffs, ps.locked, ps.failed, ps.relFailed, quantiles(ps.latencies, 0.5, 0.99, 1), ps.terms, ps.termOverlaps, ps.termOrder, ps.cutOff, ps.termsLost)
		all.sections += ps.sections
		all.violations += ps.violations
		all.fenced += ps.fenced
		all.tokenViol += ps.tokenViol
		all.handoffs += ps.handoffs
		all.locked += ps.locked
		all.failed += ps.failed
		all.relFailed += ps.relFailed
		all.latencies = append(all.latencies, ps.latencies...)
		all.terms += ps.terms
		all.termOverlaps += ps.termOverlaps
		all.termOrder += ps.termOrder
		all.termsLost += ps.termsLost
		all.cutOff += ps.cutOff
		all.cutNotEnded += ps.cutNotEnded
		all.lossMargins = append(all.lossMargins, ps.lossMargins...)
		all.successorGaps = append(all.successorGaps, ps.successorGaps...)
		ps.mu.Unlock()
	}
	fmt.Fprintf(&b, "| **all** | %d | %d | %d | %d | %d | %d | %d | %d | %s | %d | %d | %d | %d | %d |\n", all.sections, all.violations, all.fenced, all.tokenViol,
		all.handoffs, all.locked, all.failed, all.relFailed, quantiles(all.latencies, 0.5, 0.99, 1), all.terms, all.termOverlaps, all.termOrder, all.cutOff, all.termsLost)
	fmt.Fprintf(&b, "\n%d leaders cut off from every node (%d whose term's context did not end within %v); %d terms lost.\n",
		all.cutOff, all.cutNotEnded, cutOffBound, all.termsLost)
	// Negative margins and gaps: the wrong way round.
	fmt.Fprintf(&b, "A lost term's context ended before its validity's end by (min | median | max): %s\n", quantiles(all.lossMargins, 0, 0.5, 1))
	fmt.Fprintf(&b, "The next term began after a lost term's context ended by (min | median | max): %s\n", quantiles(all.successorGaps, 0, 0.5, 1))
	return b.String()
}

// quantiles gives the quantiles qs of ds as table cells, "-" each when ds
// is empty.
func quantiles(ds []time.Duration, qs ...float64) string {
	cells := make([]string, len(qs))
	for i, q := range qs {
		cells[i] = "-"
		if len(ds) > 0 {
			cells[i] = percentile(ds, q).Round(10 * time.Microsecond).String()
		}
	}
	return strings.Join(cells, " | ")
}
