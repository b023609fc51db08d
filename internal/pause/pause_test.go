package pause

import (
	"runtime"
	"testing"
	"time"

	"github.com/go-redlock/redlock/internal/redistest"
)

// The tests of this package are not parallel: each stops the whole process
// or counts on no other wait being open.

// A process stopped for 300ms during a wait was paused that long, less at
// most a tick and the slack; never more than the time that passed; and
// the wait adds at most MaxTimes times its length, and has that much left.
func TestWaitCountsAStop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGSTOP")
	}
	const d, stop = 50 * time.Millisecond, 300 * time.Millisecond
	begin := time.Now()
	w := Begin(begin, d)
	defer w.End()
	<-redistest.StopProcess(t, 0, stop)
	end := time.Now()
	paused, added := w.Paused(end)
	if least := stop - Tick - Slack; paused < least {
		t.Errorf("Paused after a stop of %v = %v, want at least %v", stop, paused, least)
	}
	if paused > end.Sub(begin) {
		t.Errorf("Paused = %v, more than the %v that passed", paused, end.Sub(begin))
	}
	if added != MaxTimes*d {
		t.Errorf("added of a %v wait after a stop of %v = %v, want its cap %v", d, stop, added, MaxTimes*d)
	}
	if want := begin.Add(d + added).Sub(end); w.Left(end) != want {
		t.Errorf("Left = %v, want %v", w.Left(end), want)
	}
	other := Begin(end, d)
	defer other.End()
	if p, _ := other.Paused(end); p != 0 {
		t.Errorf("Paused at a wait's own start = %v, want 0", p)
	}
}

// The timer runs while a wait is open, stops Linger after the last ends,
// and the next wait starts it again, keeping what it counted.
func TestTimerStopsWhenNoWaitIsOpen(t *testing.T) {
	begin := time.Now()
	w := Begin(begin, time.Millisecond)
	if !running.Load() {
		t.Fatal("Begin did not start the timer")
	}
	time.Sleep(Linger + 3*Tick)
	if !running.Load() {
		t.Fatalf("the timer stopped %v into an open wait", Linger+3*Tick)
	}
	w.End()
	deadline := time.Now().Add(Linger + 2*time.Second)
	for running.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("the timer still runs %v after the last wait ended", time.Since(begin))
		}
		time.Sleep(Tick)
	}
	before := total(mono(time.Now()))
	again := Begin(time.Now(), time.Millisecond)
	defer again.End()
	if !running.Load() {
		t.Fatal("Begin did not start the timer again")
	}
	if again.total < before {
		t.Fatalf("the measure went down when the timer started again: %v, then %v", before, again.total)
	}
}

// A wait open longer than Linger keeps the measure running: a stop 1.5s
// into it, with no other wait meanwhile, is counted.
func TestLongWaitKeepsTheMeasure(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGSTOP")
	}
	const stop = 200 * time.Millisecond
	w := Begin(time.Now(), 3*time.Second)
	defer w.End()
	time.Sleep(Linger + 500*time.Millisecond)
	<-redistest.StopProcess(t, 0, stop)
	if got, _ := w.Paused(time.Now()); got < stop-Tick-Slack {
		t.Errorf("Paused after a stop of %v, %v into a wait = %v, want at least %v", stop, Linger+500*time.Millisecond, got, stop-Tick-Slack)
	}
}
