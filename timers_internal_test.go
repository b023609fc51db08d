package redlock

import (
	"testing"
	"time"
)

// A timer an attempt put back (stopTimer) holds no tick for the attempt
// that takes it next, whether it fired unread or was stopped before, and
// fires after the new duration only.
func TestPooledTimerHoldsNoStaleTick(t *testing.T) {
	for _, fired := range []bool{true, false} {
		tm := startTimer(time.Millisecond)
		if fired {
			time.Sleep(20 * time.Millisecond) // it fires; no one reads it
		}
		stopTimer(tm)
		next := startTimer(time.Hour)
		select {
		case <-next.C:
			t.Fatalf("fired=%v: a stale tick came out of a pooled timer", fired)
		case <-time.After(20 * time.Millisecond):
		}
		next.Reset(time.Millisecond)
		select {
		case <-next.C:
		case <-time.After(5 * time.Second):
			t.Fatalf("fired=%v: a pooled timer did not fire", fired)
		}
		stopTimer(next)
	}
}
