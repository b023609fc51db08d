// Package benchmarks compares redlock with its peers on the same real
// redis-server nodes, in one process, through one interface. It is its own
// module so that the library gains no dependency.
//
//	./run                     # starts the nodes, runs everything, prints the table
//	go test -run TestCompare -v -count=1 . -compare
package benchmarks

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/redistest"
)

var (
	compare    = flag.Bool("compare", false, "run the comparison (several minutes)")
	duration   = flag.Duration("duration", 3*time.Second, "how long each library runs each workload")
	nodeBench  = flag.Bool("node", true, "add node-redlock's column when benchmarks/node is installed (npm ci)")
	reportFile = flag.String("report", "", "also write the table to this file")
	only       = flag.String("only", "", "comma-separated name prefixes: run only these libraries (node-redlock: \"node\", the raw-socket ceiling: \"ceiling\")")
)

const (
	nodes       = 5
	ttl         = 10 * time.Second
	parallelism = 16
	waiters     = 8
	hold        = time.Millisecond
	think       = 5 * time.Millisecond
)

// result is one library's figures.
type result struct {
	Seq       float64 `json:"seq"`       // ops/s, one goroutine
	Slow      float64 `json:"slow"`      // ops/s, one goroutine, 2 of 5 nodes +20ms each way
	Par       float64 `json:"par"`       // ops/s, 16 goroutines, distinct keys
	Handoffs  float64 `json:"handoffs"`  // hand-offs/s, 8 goroutines on one key
	WaitP99   float64 `json:"waitP99"`   // ms, wait for the contended lock
	Violation int     `json:"violation"` // two holders at once, contended
}

type library struct {
	name  string
	make  func([]redis.UniversalClient) locker
	nodes int // how many of the nodes it uses
}

var libraries = []library{
	{"redlock", newRedlock, nodes},
	{"redlock, fenced (WithFencing)", newFencedRedlock, nodes},
	{"redsync v4.18.1", newRedsync, nodes},
	{"floor (waits for every node)", newFloor, nodes},
	{"bsm/redislock v0.9.4 (1 node)", newBSM, 1},
}

// TestCompare runs every library on the four workloads on the same nodes
// and prints one table.
func TestCompare(t *testing.T) {
	if !*compare {
		t.Skip("the comparison runs with -compare")
	}
	nds := redistest.Start(t, nodes)
	addrs := make([]string, nodes)
	slowAddrs := make([]string, nodes)
	for i, nd := range nds {
		addrs[i] = nd.Addr()
		slowAddrs[i] = nd.Addr()
	}
	// Nodes 3 and 4 are slow: +20ms each way, behind a delay proxy.
	for _, i := range []int{3, 4} {
		p := redistest.NewProxy(t, nds[i].Addr())
		p.SetLatency(20*time.Millisecond, 20*time.Millisecond)
		slowAddrs[i] = p.Addr()
	}
	clientsFor := func(addrs []string, n int) []redis.UniversalClient {
		cs := make([]redis.UniversalClient, n)
		for i := range n {
			c := redis.NewClient(&redis.Options{Addr: addrs[i], PoolSize: 64})
			t.Cleanup(func() { _ = c.Close() })
			cs[i] = c
		}
		return cs
	}

	results := map[string]result{}
	var order []string
	for _, lib := range libraries {
		if !selected(lib.name) {
			continue
		}
		var r result
		l := lib.make(clientsFor(addrs, lib.nodes))
		r.Seq = sequential(t, l, "seq:"+lib.name)
		if lib.nodes == nodes { // the single-node reference has no minority to be slow
			r.Slow = sequential(t, lib.make(clientsFor(slowAddrs, lib.nodes)), "slow:"+lib.name)
		}
		r.Par = parallel(t, l, "par:"+lib.name)
		r.Handoffs, r.WaitP99, r.Violation = contended(t, l, "cont:"+lib.name)
		results[lib.name] = r
		order = append(order, lib.name)
		t.Logf("%s: %+v", lib.name, r)
	}
	if *nodeBench && selected("node-redlock") {
		if r, ok := runNode(t, addrs, slowAddrs); ok {
			results["node-redlock 5.0.0-beta.2"] = r
			order = append(order, "node-redlock 5.0.0-beta.2")
		}
	}
	table := formatTable(order, results)
	if selected("ceiling") {
		c := ceiling(t, addrs, "ceiling")
		table += fmt.Sprintf("\nCeiling for the sequential workload on these nodes: %.0f ops/s (raw RESP over one socket per node, written to all 5 and read from all 5 by one goroutine: SET NX PX, then a compare-and-delete script; no library, pool or goroutine per node). redlock reaches %.2fx of it.\n", c, results["redlock"].Seq/c)
	}
	fmt.Println(table)
	if *reportFile != "" {
		if err := os.WriteFile(*reportFile, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, r := range results {
		if r.Violation > 0 {
			t.Errorf("%s: %d mutual-exclusion violations", name, r.Violation)
		}
	}
}

// selected reports whether -only selects the library.
func selected(name string) bool {
	if *only == "" {
		return true
	}
	for _, p := range strings.Split(*only, ",") {
		if p != "" && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// sequential runs acquire+release in one goroutine for the duration.
func sequential(t *testing.T, l locker, key string) float64 {
	ctx := context.Background()
	n := 0
	begin := time.Now()
	for time.Since(begin) < *duration {
		unlock, err := l.Lock(ctx, key, ttl, false)
		if err != nil {
			t.Errorf("%s: lock: %v", key, err)
			return 0
		}
		if err := unlock(ctx); err != nil {
			t.Errorf("%s: unlock: %v", key, err)
			return 0
		}
		n++
	}
	return float64(n) / time.Since(begin).Seconds()
}

// parallel runs acquire+release on distinct keys from 16 goroutines.
func parallel(t *testing.T, l locker, key string) float64 {
	ctx := context.Background()
	var total atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for g := range parallelism {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("%s:%d", key, g)
			for time.Since(begin) < *duration {
				unlock, err := l.Lock(ctx, k, ttl, false)
				if err != nil {
					t.Errorf("%s: lock: %v", k, err)
					return
				}
				if err := unlock(ctx); err != nil {
					t.Errorf("%s: unlock: %v", k, err)
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(begin).Seconds()
}

// contended runs 8 goroutines that each wait for one key, hold it 1ms,
// release it and think 5ms. It returns hand-offs/s (acquisitions by a
// different goroutine than the last holder), the p99 wait in ms, and the
// violations an in-process witness saw.
func contended(t *testing.T, l locker, key string) (float64, float64, int) {
	var inside, violations atomic.Int32
	var last atomic.Int32
	last.Store(-1)
	var handoffs atomic.Int64
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	begin := time.Now()
	for g := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(begin) < *duration {
				ctx, cancel := context.WithTimeout(context.Background(), *duration+30*time.Second)
				start := time.Now()
				unlock, err := l.Lock(ctx, key, ttl, true)
				cancel()
				if err != nil {
					t.Errorf("%s: lock: %v", key, err)
					return
				}
				waited := time.Since(start)
				if inside.Add(1) > 1 {
					violations.Add(1)
				}
				if last.Swap(int32(g)) != int32(g) {
					handoffs.Add(1)
				}
				time.Sleep(hold)
				inside.Add(-1)
				if err := unlock(context.Background()); err != nil {
					t.Errorf("%s: unlock: %v", key, err)
				}
				mu.Lock()
				waits = append(waits, waited)
				mu.Unlock()
				time.Sleep(think)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin).Seconds()
	slices.Sort(waits)
	p99 := 0.0
	if len(waits) > 0 {
		p99 = float64(waits[min(len(waits)-1, len(waits)*99/100)]) / float64(time.Millisecond)
	}
	return float64(handoffs.Load()) / elapsed, p99, int(violations.Load())
}

// runNode runs node-redlock's column from benchmarks/node, when installed.
func runNode(t *testing.T, addrs, slowAddrs []string) (result, bool) {
	dir, _ := filepath.Abs("node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "redlock")); err != nil {
		t.Logf("node-redlock column skipped: run npm ci in benchmarks/node (%v)", err)
		return result{}, false
	}
	cmd := exec.Command("node", "bench.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"REDIS_ADDRS="+strings.Join(addrs, ","),
		"SLOW_ADDRS="+strings.Join(slowAddrs, ","),
		fmt.Sprintf("DURATION_MS=%d", duration.Milliseconds()))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("node-redlock: %v", err)
		return result{}, false
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Errorf("node-redlock output %q: %v", out, err)
		return result{}, false
	}
	return r, true
}

// formatTable prints the figures with redlock's ratio to each peer.
func formatTable(order []string, rs map[string]result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d local redis-server nodes, ttl %v, %v per library and workload\n\n", nodes, ttl, *duration)
	b.WriteString("| library | sequential ops/s | 2 of 5 nodes +20ms, ops/s | 16 goroutines ops/s | contended hand-offs/s | contended wait p99 | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	me := rs["redlock"]
	ratio := func(a, b float64) string {
		if b == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2fx)", a/b)
	}
	for _, name := range order {
		r := rs[name]
		slow := "n/a"
		if r.Slow > 0 {
			slow = fmt.Sprintf("%.0f", r.Slow)
		}
		if name == "redlock" {
			fmt.Fprintf(&b, "| **%s** | %.0f | %s (%.2fx of own sequential) | %.0f | %.0f | %.0f ms | %d |\n",
				name, r.Seq, slow, r.Slow/r.Seq, r.Par, r.Handoffs, r.WaitP99, r.Violation)
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f%s | %s | %.0f%s | %.0f%s | %.0f ms | %d |\n",
			name, r.Seq, ratio(me.Seq, r.Seq), slow, r.Par, ratio(me.Par, r.Par),
			r.Handoffs, ratio(me.Handoffs, r.Handoffs), r.WaitP99, r.Violation)
	}
	b.WriteString("\nRatios in brackets: redlock's figure divided by that library's (higher is better for redlock).\n")
	return b.String()
}
