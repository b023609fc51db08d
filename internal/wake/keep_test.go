package wake

import (
	"sync/atomic"
	"testing"
	"time"
)

// A set is renewed every period with the members it holds, ends with its
// last member, and Stop ends them all.
func TestKeeperRenewsEachSetWithItsMembers(t *testing.T) {
	t.Parallel()
	var k Keeper
	got := make(chan []any, 16)
	renew := func(ms []any) { got <- ms }
	if !k.Add("a", 1, 10*time.Millisecond, renew) || !k.Add("a", 2, time.Hour, renew) {
		t.Fatal("Add refused")
	}
	if ms := <-got; len(ms) != 2 || ms[0] != 1 || ms[1] != 2 {
		t.Fatalf("renewed %v, want [1 2]", ms)
	}
	if ms := <-got; len(ms) != 2 {
		t.Fatalf("renewed %v again, want both", ms)
	}
	k.Remove("a", 1)
	for ms := range got {
		if len(ms) == 1 && ms[0] == 2 {
			break // a renewal begun before the Remove may hold both
		}
	}
	k.Remove("a", 2)
	if n := k.Sets(); n != 0 {
		t.Fatalf("%d sets after the last member left", n)
	}
	var after atomic.Int32
	k.Add("b", 1, 5*time.Millisecond, func([]any) { after.Add(1) })
	k.Stop()
	time.Sleep(50 * time.Millisecond)
	if n := after.Load(); n > 1 {
		t.Fatalf("%d renewals after Stop", n)
	}
	if k.Add("c", 1, time.Millisecond, renew) {
		t.Fatal("Add after Stop was taken")
	}
}
