// Package pause measures how long this process has been kept from running:
// stopped (SIGSTOP, a VM's steal, a debugger), starved of CPU, or held up
// by its own garbage collection. A node timeout counts the node's silence,
// not the client's: every wait for a node (a Wait: a lane's watchdog, an
// attempt's collector, an operator's read) adds the pause that fell inside
// it, so that a client paused for a moment does not find every node silent
// when it runs again, with their answers waiting in its sockets.
//
// The measure is a timer that fires every Tick and notes how late it ran:
// a late timer is a process that could not run it. A process kept busy by
// its own goroutines runs its timers late too, for as long as it stays
// busy: what a wait adds is therefore capped (MaxTimes), so that a silent
// node is still found on a busy client.
//
// It runs while some wait is open (from Begin to End), and stops once none
// has been for Linger: an idle process has no timer firing. It has no goroutine
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
	// Linger is how long the timer keeps firing once no wait is open.
	Linger = time.Second
	// MaxTimes caps what a wait adds: at most MaxTimes times the wait
	// itself.
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
	last    atomic.Pointer[reading] // nil until the first wait
	open    atomic.Int64            // the waits begun and not ended
	running atomic.Bool
	mu      sync.Mutex // guards timer, busy, and the timer's start and stop
	timer   *time.Timer
	busy    int64 // mono ns: when the timer last saw a wait open
)

// Wait is a wait for a node that counts the node's silence: d from its
// start, plus the time the process was paused since, at most MaxTimes
// times d. Begin opens one; End must follow once.
type Wait struct {
	start time.Time
	d     time.Duration
	total int64 // the pause counted at start
}

// Begin opens a wait of d at start (the caller's clock reading, taken just
// before), and starts the measure if it is not running.
func Begin(start time.Time, d time.Duration) Wait {
	ns := mono(start)
	open.Add(1)
	if !running.Load() {
		startTimer(ns)
	}
	return Wait{start: start, d: d, total: total(ns)}
}

// End closes the wait.
func (w *Wait) End() { open.Add(-1) }

// Left returns how long the wait has left as of now; 0 or less once it is
// over.
func (w *Wait) Left(now time.Time) time.Duration {
	_, added := w.Paused(now)
	return w.start.Add(w.d + added).Sub(now)
}

// Due reports whether the wait is over as of now; when it is not, it sets
// t (the caller's timer, fired) to fire when it may be: a timer's wait for
// a node, made longer by a pause.
func (w *Wait) Due(t *time.Timer, now time.Time) bool {
	if left := w.Left(now); left > 0 {
		t.Reset(left)
		return false
	}
	return true
}

// Paused returns how long the process was paused in the wait as of now
// (never more than the time since its start), and how much of it the wait
// adds: at most MaxTimes times d.
func (w *Wait) Paused(now time.Time) (paused, added time.Duration) {
	ns := mono(now)
	p := time.Duration(max(0, min(total(ns)-w.total, ns-mono(w.start))))
	return p, min(p, MaxTimes*w.d)
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

// startTimer starts the timer, unless another wait just did.
func startTimer(ns int64) {
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
	busy = ns
	if timer == nil {
		timer = time.AfterFunc(Tick, fire)
	} else {
		timer.Reset(Tick)
	}
}

// fire notes how late the timer ran and sets it again, or stops it when no
// wait has been open for Linger. (It, not End, reads the clock for that:
// a wait costs two atomic adds.)
func fire() {
	mu.Lock()
	defer mu.Unlock()
	ns := mono(time.Now())
	r := last.Load()
	t := r.total
	if late := ns - r.due; late > int64(Slack) {
		t += late
	}
	if open.Load() > 0 {
		busy = ns
	}
	if ns-busy > int64(Linger) {
		last.Store(&reading{total: t})
		running.Store(false)
		if open.Load() == 0 {
			return
		}
		// A wait begun between the check above and running's store saw
		// the timer running and started nothing: go on for it.
		ns = mono(time.Now())
		busy = ns
		running.Store(true)
	}
	last.Store(&reading{total: t, due: ns + int64(Tick)})
	timer.Reset(Tick)
}
