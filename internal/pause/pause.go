// Package pause measures how long this process has been kept from running:
// stopped (SIGSTOP, a VM's steal, a debugger), starved of CPU by other
// processes, or held up by its own garbage collection. A node timeout
// counts the node's silence, not the client's: the lanes' watchdogs and the
// attempts' collectors add the pause that fell inside their wait (see
// internal/lane and attempt.go), so that a client paused for 300ms does not
// find every node silent when it runs again, with their answers waiting in
// its sockets.
//
// The measure is a timer that fires every Tick and notes how late it ran:
// a late timer is a process that could not run it. It runs while the
// process uses it (Since, from a lane or an attempt), and stops Linger
// after the last use: an idle process has no timer firing. It has no
// goroutine of its own (the timer's function runs in one of the runtime's
// for a moment).
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
	// Linger is how long the timer keeps firing after the last use.
	Linger = time.Second
)

// reading is the measure at the timer's last firing: the pause counted so
// far, and when the timer is due next (0 while it is stopped). One atomic
// pointer holds both, so that a reader never sees a late firing counted
// twice (in total and as the time past due) or not at all.
type reading struct {
	total int64 // ns
	due   int64 // unix ns; 0: stopped
}

var (
	now     atomic.Pointer[reading] // nil until the first use
	lastUse atomic.Int64            // unix ns
	running atomic.Bool
	mu      sync.Mutex // guards timer
	timer   *time.Timer
)

// Since returns how long the process has been paused since mark, a value
// of Mark's, as of t (now). It is never negative and never more than t's
// distance from mark's time.
func Since(mark Mark, t time.Time) time.Duration {
	d := time.Duration(total(t.UnixNano()) - mark.total)
	return max(0, min(d, t.Sub(time.Unix(0, mark.at))))
}

// Mark is the measure at one moment: what Since counts from.
type Mark struct {
	total int64
	at    int64
}

// Now starts the measure if it is not running and returns its mark as of
// t (the caller's clock reading, taken just before).
func Now(t time.Time) Mark {
	ns := t.UnixNano()
	lastUse.Store(ns)
	if !running.Load() {
		start(ns)
	}
	return Mark{total: total(ns), at: ns}
}

// total returns the pause counted by ns: the firings' lateness so far, and
// the time past the timer's due time, when it is late right now.
func total(ns int64) int64 {
	r := now.Load()
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
	if r := now.Load(); r != nil {
		t = r.total
	}
	now.Store(&reading{total: t, due: ns + int64(Tick)})
	running.Store(true)
	if timer == nil {
		timer = time.AfterFunc(Tick, fire)
	} else {
		timer.Reset(Tick)
	}
}

// fire notes how late the timer ran and sets it again, or stops it when
// the measure has not been used for Linger.
func fire() {
	ns := time.Now().UnixNano()
	mu.Lock()
	defer mu.Unlock()
	r := now.Load()
	t := r.total
	if late := ns - r.due; late > int64(Slack) {
		t += late
	}
	if ns-lastUse.Load() > int64(Linger) {
		now.Store(&reading{total: t})
		running.Store(false)
		// A use between the load above and running's store saw it
		// running and started nothing: start again for it.
		if ns2 := time.Now().UnixNano(); ns2-lastUse.Load() <= int64(Linger) {
			now.Store(&reading{total: t, due: ns2 + int64(Tick)})
			running.Store(true)
			timer.Reset(Tick)
		}
		return
	}
	now.Store(&reading{total: t, due: ns + int64(Tick)})
	timer.Reset(Tick)
}
