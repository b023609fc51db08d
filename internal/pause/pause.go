// Package pause measures how long this process has been kept from running:
// stopped (SIGSTOP, a VM's steal, a debugger), starved of CPU, or held up
// by its own garbage collection. A node timeout counts the node's silence,
// not the client's: the lanes' watchdogs and the attempts' collectors add
// the pause that fell inside their wait (see internal/lane and attempt.go),
// so that a client paused for 300ms does not find every node silent when
// it runs again, with their answers waiting in its sockets.
//
// The measure is a timer that fires every Tick and notes how late it ran:
// a late timer is a process that could not run it. A process kept busy by
// its own goroutines runs its timers late too, for as long as it stays
// busy: what a wait adds is therefore capped (Allowance), so that a silent
// node is still found on a busy client.
//
// It runs while some wait uses it (from Now to its Done), and stops Linger
// after the last: an idle process has no timer firing. It has no goroutine
// of its own (the timer's function runs in one of the runtime's for a
// moment). Times are read on the monotonic clock: a step of the wall clock
// is no pause.
package pause

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Tick is how often the timer fires while the measure is in use.
	Tick = 10 * time.Millisecond
	// Slack is how late a timer may fire without counting: the runtime's
	// own timer slack, and a busy but running process.
	Slack = time.Millisecond
	// Linger is how long the timer keeps firing after the last wait that
	// used it ended.
	Linger = time.Second
	// MaxTimes caps what a wait adds: at most MaxTimes times the wait
	// itself (a 100ms node timeout waits 500ms at most in all).
	MaxTimes = 4
)

// epoch is the origin of the package's clock: times are read as the
// monotonic time since it.
var epoch = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }

// reading is the measure at the timer's last firing: the pause counted so
// far, and when the timer is due next (0 while it is stopped). One atomic
// pointer holds both, so that a reader never sees a late firing counted
// twice (in total and as the time past due) or not at all.
type reading struct {
	total int64 // ns
	due   int64 // mono ns; 0: stopped
}

var (
	last    atomic.Pointer[reading] // nil until the first use
	waits   atomic.Int64            // the waits begun (Now) and not ended (Done)
	ended   atomic.Int64            // mono ns: when the last wait ended
	running atomic.Bool
	mu      sync.Mutex // guards timer, and the timer's start and stop
	timer   *time.Timer
)

// Mark is the measure at one moment: what Since counts from.
type Mark struct {
	total int64
	at    int64 // mono ns
}

// Now begins a wait: it starts the measure if it is not running, keeps it
// running until the wait's Done, and returns its mark as of t (the
// caller's clock reading, taken just before). Every Now must be followed
// by one Done.
func Now(t time.Time) Mark {
	ns := mono(t)
	waits.Add(1)
	if !running.Load() {
		start(ns)
	}
	return Mark{total: total(ns), at: ns}
}

// Done ends a wait begun by Now.
func Done() {
	ended.Store(mono(time.Now()))
	waits.Add(-1)
}

// Since returns how long the process has been paused since mark, as of t.
// It is never negative and never more than the time between them. (While
// the timer's function runs it may read up to that function's own delay
// less than a moment before.)
func Since(mark Mark, t time.Time) time.Duration {
	ns := mono(t)
	return time.Duration(max(0, min(total(ns)-mark.total, ns-mark.at)))
}

// Allowance is what a wait of d from mark adds as of t: Since, at most
// MaxTimes times d.
func Allowance(mark Mark, t time.Time, d time.Duration) time.Duration {
	return min(Since(mark, t), MaxTimes*d)
}

// total returns the pause counted by ns: the firings' lateness so far, and
// the time past the timer's due time, when it is late right now.
func total(ns int64) int64 {
	r := last.Load()
	if r == nil {
		return 0
	}
	t := r.total
	if r.due != 0 {
		if late := ns - r.due - int64(Slack); late > 0 {
			t += late
		}
	}
	return t
}

// start starts the timer, unless another caller just did.
func start(ns int64) {
	mu.Lock()
	defer mu.Unlock()
	if running.Load() {
		return
	}
	var t int64
	if r := last.Load(); r != nil {
		t = r.total
	}
	last.Store(&reading{total: t, due: ns + int64(Tick)})
	running.Store(true)
	if timer == nil {
		timer = time.AfterFunc(Tick, fire)
	} else {
		timer.Reset(Tick)
	}
}

// idle reports whether no wait uses the measure and the last ended over
// Linger before ns.
func idle(ns int64) bool { return waits.Load() <= 0 && ns-ended.Load() > int64(Linger) }

// fire notes how late the timer ran and sets it again, or stops it when
// no wait has used the measure for Linger.
func fire() {
	mu.Lock()
	defer mu.Unlock()
	ns := mono(time.Now())
	r := last.Load()
	t := r.total
	if late := ns - r.due; late > int64(Slack) {
		t += late
	}
	if idle(ns) {
		last.Store(&reading{total: t})
		running.Store(false)
		// A wait begun between the check above and running's store saw
		// the timer running and started nothing: start again for it.
		if ns2 := mono(time.Now()); !idle(ns2) {
			last.Store(&reading{total: t, due: ns2 + int64(Tick)})
			running.Store(true)
			timer.Reset(Tick)
		}
		return
	}
	last.Store(&reading{total: t, due: ns + int64(Tick)})
	timer.Reset(Tick)
}

// Wait is a wait for a node that counts the node's silence: d from its
// start, plus the pause since (Allowance). Begin starts one; End must
// follow.
type Wait struct {
	start time.Time
	d     time.Duration
	mark  Mark
}

// Begin begins a wait of d at start (the caller's clock reading).
func Begin(start time.Time, d time.Duration) Wait {
	return Wait{start: start, d: d, mark: Now(start)}
}

// Left returns how long the wait has left as of now; 0 or less once it is
// over.
func (w *Wait) Left(now time.Time) time.Duration {
	_, added := w.Paused(now)
	return w.start.Add(w.d + added).Sub(now)
}

// Paused returns how long the process was paused in the wait, as of now,
// and how much of it the wait adds (at most MaxTimes times d).
func (w *Wait) Paused(now time.Time) (paused, added time.Duration) {
	p := Since(w.mark, now)
	return p, min(p, MaxTimes*w.d)
}

// End ends the wait.
func (w *Wait) End() { Done() }
