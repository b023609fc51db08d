package pause

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// stop stops this process for d, from a child shell, and returns once it
// runs again.
func stop(t *testing.T, d time.Duration) {
	t.Helper()
	pid := os.Getpid()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("kill -STOP %d; sleep %.3f; kill -CONT %d", pid, d.Seconds(), pid))
	if err := cmd.Run(); err != nil {
		t.Fatalf("the shell that stops this process: %v", err)
	}
}

// A process stopped for 300ms has been paused that long, less at most a
// tick and the slack; and the pause never exceeds the time that passed,
// nor shrinks.
func TestSinceCountsAStop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGSTOP")
	}
	const d = 300 * time.Millisecond
	begin := time.Now()
	m := Now(begin)
	defer Done()
	stop(t, d)
	end := time.Now()
	got := Since(m, end)
	if least := d - Tick - Slack; got < least {
		t.Errorf("Since after a stop of %v = %v, want at least %v", d, got, least)
	}
	if got > end.Sub(begin) {
		t.Errorf("Since = %v, more than the %v that passed", got, end.Sub(begin))
	}
	if again := Since(m, time.Now()); again < got {
		t.Errorf("Since went down: %v, then %v", got, again)
	}
	if a := Allowance(m, end, 50*time.Millisecond); a != MaxTimes*50*time.Millisecond {
		t.Errorf("Allowance of a 50ms wait after a stop of %v = %v, want its cap %v", d, a, MaxTimes*50*time.Millisecond)
	}
	z := Since(Now(end), end)
	Done()
	if z != 0 {
		t.Errorf("Since(Now(t), t) = %v, want 0", z)
	}
}

// The timer runs while a wait lasts, stops Linger after the last ends, and
// the next wait starts it again, keeping what it counted.
func TestTimerStopsWhenUnused(t *testing.T) {
	begin := time.Now()
	Now(begin)
	if !running.Load() {
		t.Fatal("Now did not start the timer")
	}
	time.Sleep(Linger + 3*Tick)
	if !running.Load() {
		t.Fatalf("the timer stopped %v into a wait", Linger+3*Tick)
	}
	Done()
	deadline := time.Now().Add(Linger + 2*time.Second)
	for running.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("the timer still runs %v after its last use", time.Since(begin))
		}
		time.Sleep(Tick)
	}
	before := total(time.Now().UnixNano())
	m := Now(time.Now())
	defer Done()
	if !running.Load() {
		t.Fatal("Now did not start the timer again")
	}
	if m.total < before {
		t.Fatalf("the measure went down when the timer started again: %v, then %v", before, m.total)
	}
}

// A wait longer than Linger keeps the measure running to its end: a stop
// 1.5s into a wait, with no other use of the measure meanwhile, is
// counted.
func TestLongWaitKeepsTheMeasure(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGSTOP")
	}
	const d = 200 * time.Millisecond
	m := Now(time.Now())
	defer Done()
	time.Sleep(Linger + 500*time.Millisecond)
	stop(t, d)
	if got, least := Since(m, time.Now()), d-Tick-Slack; got < least {
		t.Errorf("Since after a stop of %v, %v into a wait = %v, want at least %v", d, Linger+500*time.Millisecond, got, least)
	}
}
