// Package benchmarks compares redlock with its peers on the same real
// redis-server nodes, through one interface: in one process, and for the
// cross-process contended workload (cross_test.go) in four. It is its own
// module so that the library gains no dependency.
//
//	./run                     # starts the nodes, runs everything, prints the tables
//	go test -run TestCompare -v -count=1 . -compare
//	go test -run '^TestCompare$' -count=1 -v . -compare -workloads contended,cross -only redlock,redsync
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

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

var (
	compare    = flag.Bool("compare", false, "run the comparison (several minutes)")
	duration   = flag.Duration("duration", 3*time.Second, "how long each library runs each workload")
	nodeBench  = flag.Bool("node", true, "add node-redlock's column when benchmarks/node is installed (npm ci)")
	reportFile = flag.String("report", "", "also write the table to this file")
	only       = flag.String("only", "", "comma-separated name prefixes: run only these libraries (node-redlock: \"node\", the raw-socket ceiling: \"ceiling\"; a name ending in $: that row alone, as \"redlock$\")")
	workloads  = flag.String("workloads", "", "comma-separated: run only these workloads, of "+strings.Join(workloadNames, ", ")+" (default: all but "+strings.Join(optIn, " and ")+")")
)

// The workloads, as -workloads and library.workloads name them: the four of
// the first table, in one process, and the cross-process contended one of
// the second table.
const (
	wSeq       = "seq"       // one goroutine, acquire+release
	wSlow      = "slow"      // the same, 2 of 5 nodes +20ms each way
	wPar       = "par"       // 16 goroutines, distinct keys
	wContended = "contended" // 8 goroutines of one process, one key
	wCross     = "cross"     // 4 processes × 2 goroutines, one key
	wInterop   = "interop"   // the same, 2 processes of redlock and 2 of node-redlock on one key
	wHerd      = "herd"      // N waiters over P processes, one key, no think time (herd_test.go)
	wHolders   = "holders"   // N calls of Using holding distinct keys (holders_test.go)
)

var workloadNames = []string{wSeq, wSlow, wPar, wContended, wCross, wInterop, wHerd, wHolders}

// optIn is the workloads that run only when -workloads names them: they
// take minutes.
var optIn = []string{wHerd, wHolders}

// inProcess is the workloads of the first table.
const inProcess = wSeq + "," + wSlow + "," + wPar + "," + wContended

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
	Busy      float64 `json:"busy"`      // %, of the contended run's time some goroutine held the lock
	WaitP99   float64 `json:"waitP99"`   // ms, wait for the contended lock
	Violation int     `json:"violation"` // two holders at once, contended
}

type library struct {
	name      string
	make      func([]redis.UniversalClient) locker
	nodes     int    // how many of the nodes it uses
	workloads string // comma-separated, the workloads it runs; "": all
}

// libraries is every Go row, in the tables' order. The cross-process
// children find theirs here by name.
var libraries = []library{
	{name: "redlock", make: newRedlock(), nodes: nodes},
	// Hand-over and the fair queue only change how waiters take turns: the
	// rows run the contended workloads, beside redlock's defaults.
	{name: "redlock, no hand-over (WithHandOver(0, 0))", make: newRedlock(redlock.WithHandOver(0, 0)), nodes: nodes, workloads: wContended + "," + wCross},
	{name: "redlock, fair queue (WithFairQueue(true))", make: newRedlock(redlock.WithFairQueue(true)), nodes: nodes, workloads: wContended + "," + wCross},
	{name: "redlock, fenced (WithFencing)", make: newRedlock(redlock.WithFencing(true)), nodes: nodes, workloads: inProcess},
	// The client adapters: the same Redlock, its nodes through rueidis and
	// valkey-go (one client per server each, as go-redis's row).
	{name: "redlock over rueidis v1.0.79 (redlockrueidis)", make: newRedlockRueidis, nodes: nodes, workloads: wSeq + "," + wPar + "," + wContended},
	{name: "redlock over valkey-go v1.0.79 (redlockvalkey)", make: newRedlockValkey, nodes: nodes, workloads: wSeq + "," + wPar + "," + wContended},
	{name: "redsync v4.18.1", make: newRedsync, nodes: nodes},
	{name: "floor (waits for every node)", make: newFloor, nodes: nodes, workloads: inProcess},
	{name: "bsm/redislock v0.9.4 (1 node)", make: newBSM, nodes: 1},
}

// nodeName is node-redlock's row, run by node/bench.js.
const nodeName = "node-redlock 5.0.0-beta.2"

// runs reports whether lib runs workload w in this run: lib has it, and
// -workloads, when given, names it.
func (lib library) runs(w string) bool {
	return (lib.workloads == "" || slices.Contains(strings.Split(lib.workloads, ","), w)) && workloadSelected(w)
}

// workloadSelected reports whether -workloads selects workload w.
func workloadSelected(w string) bool {
	if *workloads == "" {
		return !slices.Contains(optIn, w)
	}
	return slices.Contains(strings.Split(*workloads, ","), w)
}

// TestCompare runs every library on the workloads on the same nodes and
// prints two tables: the in-process workloads, then the cross-process
// contended one.
func TestCompare(t *testing.T) {
	if !*compare {
		t.Skip("the comparison runs with -compare")
	}
	for _, w := range strings.Split(*workloads, ",") {
		if w != "" && !slices.Contains(workloadNames, w) {
			t.Fatalf("-workloads: unknown workload %q, want some of %s", w, strings.Join(workloadNames, ","))
		}
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

	var rows []row
	var crossRows []crossRow
	for _, lib := range libraries {
		if !selected(lib.name) {
			continue
		}
		var r result
		ran := false
		cs := clientsFor(addrs, lib.nodes)
		l := lib.make(cs)
		if lib.runs(wSeq) {
			r.Seq, ran = sequential(t, l, "seq:"+lib.name), true
		}
		if lib.runs(wSlow) && lib.nodes == nodes { // the single-node reference has no minority to be slow
			scs := clientsFor(slowAddrs, lib.nodes)
			sl := lib.make(scs)
			r.Slow, ran = sequential(t, sl, "slow:"+lib.name), true
			closeRow(sl, scs)
		}
		if lib.runs(wPar) {
			r.Par, ran = parallel(t, l, "par:"+lib.name), true
		}
		if lib.runs(wContended) {
			r.Handoffs, r.Busy, r.WaitP99, r.Violation = contended(t, l, "cont:"+lib.name)
			ran = true
		}
		// Done with this row's locker and clients: a row that left its
		// goroutines and connections behind made every later row slower
		// (the rows of one run differed by up to 1.5x in their order).
		closeRow(l, cs)
		if ran {
			rows = append(rows, row{lib.name, r, lib.nodes == nodes})
			t.Logf("%s: %+v", lib.name, r)
		}
		if lib.runs(wCross) {
			c := crossGo(t, lib.name, addrs[:lib.nodes])
			crossRows = append(crossRows, crossRow{lib.name, c})
			t.Logf("%s, cross-process: %+v", lib.name, c)
		}
	}
	if *nodeBench && selected("node-redlock") {
		var ws []string
		for _, w := range []string{wSeq, wSlow, wPar, wContended} {
			if workloadSelected(w) {
				ws = append(ws, w)
			}
		}
		if len(ws) > 0 {
			if r, ok := runNode(t, addrs, slowAddrs, ws); ok {
				rows = append(rows, row{nodeName, r, true})
			}
		}
		if workloadSelected(wCross) && nodeInstalled(t) {
			c := crossNode(t, addrs)
			crossRows = append(crossRows, crossRow{nodeName, c})
			t.Logf("%s, cross-process: %+v", nodeName, c)
		}
		if workloadSelected(wInterop) && selected("redlock") && nodeInstalled(t) {
			c := crossMixed(t, addrs)
			crossRows = append(crossRows, crossRow{interopName, c})
			t.Logf("%s, cross-process: %+v", interopName, c)
		}
	}
	var table string
	if len(rows) > 0 {
		table = formatTable(rows)
	}
	if selected("ceiling") && workloadSelected(wSeq) {
		c := ceiling(t, addrs, "ceiling")
		table += fmt.Sprintf("\nCeiling for the sequential workload on these nodes: %.0f ops/s (raw RESP over one socket per node, written to all 5 and read from all 5 by one goroutine: SET NX PX, then a compare-and-delete script; no library, pool or goroutine per node).", c)
		for _, r := range rows {
			if r.name == "redlock" && r.Seq > 0 {
				table += fmt.Sprintf(" redlock reaches %.2fx of it.", r.Seq/c)
			}
		}
		table += "\n"
	}
	if len(crossRows) > 0 {
		if table != "" {
			table += "\n"
		}
		table += formatCross(crossRows)
	}
	for _, w := range []struct {
		name string
		run  func(*testing.T, []string) string
	}{{wHerd, herd}, {wHolders, holders}} {
		if workloadSelected(w.name) {
			if table != "" {
				table += "\n"
			}
			table += w.run(t, addrs[:herdNodes])
		}
	}
	fmt.Println(table)
	if *reportFile != "" {
		if err := os.WriteFile(*reportFile, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows {
		if r.Violation > 0 {
			t.Errorf("%s: %d mutual-exclusion violations", r.name, r.Violation)
		}
	}
	for _, r := range crossRows {
		if r.Violations > 0 {
			t.Errorf("%s, cross-process: %d mutual-exclusion violations", r.name, r.Violations)
		}
	}
}

// row is one line of the first table: a library's in-process figures, zero
// for the workloads it did not run.
type row struct {
	name string
	result
	quorum bool // it uses every node, so the slow-minority workload applies
}

// closeRow closes a row's locker, when it has a Close, and its clients.
func closeRow(l locker, cs []redis.UniversalClient) {
	if c, ok := l.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	for _, c := range cs {
		_ = c.Close()
	}
}

// selected reports whether -only selects the library.
func selected(name string) bool {
	if *only == "" {
		return true
	}
	for _, p := range strings.Split(*only, ",") {
		if exact, ok := strings.CutSuffix(p, "$"); ok {
			if name == exact {
				return true
			}
		} else if p != "" && strings.HasPrefix(name, p) {
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
// different goroutine than the last holder), the busy % (the time some
// goroutine held the lock, from Lock's return to the call of unlock, over
// the elapsed time), the p99 wait in ms, and the violations an in-process
// witness saw.
func contended(t *testing.T, l locker, key string) (handoffsPerS, busy, p99 float64, violations int) {
	var inside, witnessed atomic.Int32
	var last atomic.Int32
	last.Store(-1)
	var handoffs, held atomic.Int64
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
				granted := time.Now()
				waited := granted.Sub(start)
				if inside.Add(1) > 1 {
					witnessed.Add(1)
				}
				if last.Swap(int32(g)) != int32(g) {
					handoffs.Add(1)
				}
				time.Sleep(hold)
				inside.Add(-1)
				held.Add(int64(time.Since(granted)))
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
	elapsed := time.Since(begin)
	busy = 100 * float64(held.Load()) / float64(elapsed)
	return float64(handoffs.Load()) / elapsed.Seconds(), busy, p99ms(waits), int(witnessed.Load())
}

// p99ms returns the 99th percentile of ds in milliseconds, 0 for none. It
// sorts ds.
func p99ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[min(len(ds)-1, len(ds)*99/100)]) / float64(time.Millisecond)
}

// nodeInstalled reports whether benchmarks/node has node-redlock (npm ci).
func nodeInstalled(t *testing.T) bool {
	if _, err := os.Stat(filepath.Join("node", "node_modules", "redlock")); err != nil {
		t.Logf("node-redlock skipped: run npm ci in benchmarks/node (%v)", err)
		return false
	}
	return true
}

// runNode runs node-redlock's row of the first table from benchmarks/node,
// when installed, on the workloads ws.
func runNode(t *testing.T, addrs, slowAddrs, ws []string) (result, bool) {
	if !nodeInstalled(t) {
		return result{}, false
	}
	cmd := exec.Command("node", "bench.js")
	cmd.Dir = "node"
	cmd.Env = append(os.Environ(),
		"REDIS_ADDRS="+strings.Join(addrs, ","),
		"SLOW_ADDRS="+strings.Join(slowAddrs, ","),
		"WORKLOADS="+strings.Join(ws, ","),
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

// formatTable prints the in-process figures with redlock's ratio to each
// peer; "–" for a workload a row did not run.
func formatTable(rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d local redis-server nodes, ttl %v, %v per library and workload\n\n", nodes, ttl, *duration)
	b.WriteString("| library | sequential ops/s | 2 of 5 nodes +20ms, ops/s | 16 goroutines ops/s | contended hand-offs/s | contended busy % | contended wait p99 | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	var me result
	for _, r := range rows {
		if r.name == "redlock" {
			me = r.result
		}
	}
	num := func(v float64, format string) string {
		if v == 0 {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	// ratio is redlock's figure over the peer's, when both ran.
	ratio := func(mine, theirs float64) string {
		if mine == 0 || theirs == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2fx)", mine/theirs)
	}
	for _, r := range rows {
		slow := "n/a"
		if r.quorum {
			slow = num(r.Slow, "%.0f")
		}
		cont := num(r.Busy, "%.0f %%")
		wait := num(r.WaitP99, "%.0f ms")
		if r.name == "redlock" {
			if r.Slow > 0 && r.Seq > 0 {
				slow += fmt.Sprintf(" (%.2fx of own sequential)", r.Slow/r.Seq)
			}
			fmt.Fprintf(&b, "| **%s** | %s | %s | %s | %s | %s | %s | %d |\n",
				r.name, num(r.Seq, "%.0f"), slow, num(r.Par, "%.0f"), num(r.Handoffs, "%.0f"), cont, wait, r.Violation)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s%s | %s | %s%s | %s%s | %s | %s | %d |\n",
			r.name, num(r.Seq, "%.0f"), ratio(me.Seq, r.Seq), slow, num(r.Par, "%.0f"), ratio(me.Par, r.Par),
			num(r.Handoffs, "%.0f"), ratio(me.Handoffs, r.Handoffs), cont, wait, r.Violation)
	}
	b.WriteString("\nRatios in brackets: redlock's figure divided by that library's (higher is better for redlock).\n")
	return b.String()
}
