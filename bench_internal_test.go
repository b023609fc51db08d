package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/go-redlock/redlock/internal/redistest"
)

// BenchmarkVoteCounting measures the engine alone: one Acquire over 5 fake
// nodes that answer at once (no Redis, no network), so the figure is the
// fan-out, vote counting, validity maths and allocations of redlock itself.
//
//	go test -run '^$' -bench VoteCounting -benchmem
func BenchmarkVoteCounting(b *testing.B) {
	nodes := make([]*redistest.Fake, 5)
	for i := range nodes {
		nodes[i] = &redistest.Fake{Result: int64(1)}
	}
	rl := newFake(b, nodes)
	ctx := context.Background()
	keys := []string{"k"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rl.Acquire(ctx, keys, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecided measures the decision rule on its own.
func BenchmarkDecided(b *testing.B) {
	n := 0
	for b.Loop() {
		if done, won := decided(5, n%4, 2); done && won {
			n++
		}
		n++
	}
}
