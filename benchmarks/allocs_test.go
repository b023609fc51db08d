package benchmarks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/redistest"
)

// BenchmarkAcquireRelease measures one uncontended acquire+release of each Go
// library on the same 5 real local nodes, with allocs/op:
//
//	go test -run '^$' -bench AcquireRelease -benchmem .
func BenchmarkAcquireRelease(b *testing.B) {
	nds := redistest.Start(b, nodes)
	for _, lib := range libraries {
		if lib.workloads != "" && !strings.Contains(lib.workloads, wSeq) {
			continue // a contended-only row: the uncontended path is redlock's
		}
		b.Run(lib.name, func(b *testing.B) {
			cs := make([]redis.UniversalClient, lib.nodes)
			for i := range cs {
				c := redis.NewClient(&redis.Options{Addr: nds[i].Addr()})
				b.Cleanup(func() { _ = c.Close() })
				cs[i] = c
			}
			l := lib.make(cs)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				unlock, err := l.Lock(ctx, "bench:"+lib.name, 10*time.Second, false)
				if err != nil {
					b.Fatalf("lock: %v", err)
				}
				if err := unlock(ctx); err != nil {
					b.Fatalf("unlock: %v", err)
				}
			}
		})
	}
}
