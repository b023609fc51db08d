package benchmarks

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The cross-process contended workload: crossProcs processes of crossWaiters
// goroutines each wait for one key, hold it 1ms (hold), release it and think
// 5ms (think), for -duration. Each process has its own clients and its own
// Redlock (or the peer's equivalent), as separate services would: what the
// workload measures is how the waiters of different processes take turns.
const (
	crossProcs   = 4
	crossWaiters = 2
	// crossLead is how far ahead the parent sets the common start time,
	// so that every child is connected and waiting for it.
	crossLead = 1500 * time.Millisecond
	// overtakeMargin: a grant overtakes a waiter only if that waiter began
	// waiting more than this before the grantee. It covers the time from
	// recording start to the first attempt reaching the nodes (a
	// goroutine's scheduling, a connection from the pool, the request on
	// the wire), which can put a waiter that recorded an earlier start
	// behind one that recorded a later one with no fault of the library.
	overtakeMargin = time.Millisecond
)

// The environment of a cross-process child. The child is the test binary
// itself, run again with -test.run=^TestCrossChild$.
const (
	envChild    = "BENCH_CHILD"    // "1" in a child
	envLib      = "BENCH_LIB"      // the library's name in libraries
	envAddrs    = "BENCH_ADDRS"    // the nodes, comma-separated host:port
	envKey      = "BENCH_KEY"      // the contended key
	envProc     = "BENCH_PROC"     // the child's number, 0 to crossProcs-1
	envBegin    = "BENCH_BEGIN"    // UnixNano when the waiters start
	envDuration = "BENCH_DURATION" // how long they start new waits, a time.Duration
	envOut      = "BENCH_OUT"      // the file the grants are written to
	// envInterop is "1" in a redlock child of the interop workload: a wait
	// that outlasts its context ends that goroutine's run without failing
	// the child (node-redlock's waiters can hold the key on a minority of
	// nodes for a ttl; see crossMixed).
	envInterop = "BENCH_INTEROP"
)

// grant is one acquisition in a cross-process run, one JSON line in a
// child's output. The times are wall-clock UnixNano, comparable across the
// processes of one machine.
type grant struct {
	Proc     int   `json:"proc"`     // the process
	G        int   `json:"g"`        // the goroutine, within the process
	Start    int64 `json:"start"`    // it began waiting (before Lock)
	Granted  int64 `json:"granted"`  // Lock returned
	Released int64 `json:"released"` // unlock was called
}

// cross is the figures of one cross-process run.
type cross struct {
	Grants     int
	PerS       float64         // grants/s
	Busy       float64         // %: the time some process held the lock, over the run's
	Overtakes  int             // grants that overtook an earlier waiter
	WaitP99    float64         // ms, granted − start
	Violations int             // grants that overlap an earlier holder's
	PerProc    [crossProcs]int // grants of each process
}

// crossRow is one line of the second table.
type crossRow struct {
	name string
	cross
}

// TestCrossChild is one process of the cross-process workload, run by
// crossGo with the environment above; it is skipped otherwise.
func TestCrossChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("a child of the cross-process workload: TestCompare runs it")
	}
	name := os.Getenv(envLib)
	i := slices.IndexFunc(libraries, func(l library) bool { return l.name == name })
	if i < 0 {
		t.Fatalf("%s=%q: no such library", envLib, name)
	}
	proc, err1 := strconv.Atoi(os.Getenv(envProc))
	begin, err2 := strconv.ParseInt(os.Getenv(envBegin), 10, 64)
	d, err3 := time.ParseDuration(os.Getenv(envDuration))
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("child environment: %v %v %v", err1, err2, err3)
	}
	addrs := strings.Split(os.Getenv(envAddrs), ",")
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: 64})
		defer func() { _ = c.Close() }()
		clients[i] = c
	}
	l := libraries[i].make(clients)
	if c, ok := l.(io.Closer); ok {
		// Deferred after the clients' Close, so it runs before them.
		defer func() { _ = c.Close() }()
	}
	key := os.Getenv(envKey)

	time.Sleep(time.Until(time.Unix(0, begin)))
	end := time.Unix(0, begin).Add(d)
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for g := range crossWaiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
				start := time.Now()
				unlock, err := l.Lock(ctx, key, ttl, true)
				cancel()
				if err != nil && os.Getenv(envInterop) == "1" {
					t.Logf("%s: gave up waiting: %v", key, err)
					return
				}
				if err != nil {
					t.Errorf("%s: lock: %v", key, err)
					return
				}
				granted := time.Now()
				time.Sleep(hold)
				released := time.Now()
				if err := unlock(context.Background()); err != nil {
					t.Errorf("%s: unlock: %v", key, err)
				}
				mu.Lock()
				grants = append(grants, grant{proc, g, start.UnixNano(), granted.UnixNano(), released.UnixNano()})
				mu.Unlock()
				time.Sleep(think)
			}
		}()
	}
	wg.Wait()
	var b []byte
	for _, gr := range grants {
		line, _ := json.Marshal(gr)
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(os.Getenv(envOut), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// crossGo runs the cross-process workload for the Go library name on addrs,
// in crossProcs copies of this test binary.
func crossGo(t *testing.T, name string, addrs []string) cross {
	return crossRun(t, func(proc int, begin time.Time, out string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrossChild$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			envChild+"=1",
			envLib+"="+name,
			envAddrs+"="+strings.Join(addrs, ","),
			envKey+"=cross:"+name,
			envProc+"="+strconv.Itoa(proc),
			envBegin+"="+strconv.FormatInt(begin.UnixNano(), 10),
			envDuration+"="+duration.String(),
			envOut+"="+out)
		return cmd
	})
}

// crossNode runs the cross-process workload for node-redlock, in crossProcs
// processes of node/bench.js in its child mode, which writes the same lines.
func crossNode(t *testing.T, addrs []string) cross {
	return crossRun(t, func(proc int, begin time.Time, out string) *exec.Cmd {
		cmd := exec.Command("node", "bench.js")
		cmd.Dir = "node"
		cmd.Env = append(os.Environ(),
			"MODE=cross",
			"REDIS_ADDRS="+strings.Join(addrs, ","),
			"KEY=cross:node",
			"PROC="+strconv.Itoa(proc),
			"BEGIN_NS="+strconv.FormatInt(begin.UnixNano(), 10),
			fmt.Sprintf("DURATION_MS=%d", duration.Milliseconds()),
			"OUT="+out)
		return cmd
	})
}

// interopName is the row of the interop workload.
const interopName = "redlock and " + nodeName + ", 2 processes each"

// crossMixed runs the cross-process workload with redlock's children and
// node-redlock's taking turns on one key (even processes redlock's, odd
// node-redlock's): the grants must never overlap, whichever library took
// them (the violations column). node-redlock 5 keeps a failed attempt's
// writes between its retries (its self-blocking, research node-redlock.md
// §4.6), so its waiters can hold the key on a minority of nodes until the
// ttl ends: no one gets a quorum meanwhile, and a redlock waiter may give
// up at its context's end (counted by its absence, not an error).
func crossMixed(t *testing.T, addrs []string) cross {
	const key = "cross:interop"
	return crossRun(t, func(proc int, begin time.Time, out string) *exec.Cmd {
		var cmd *exec.Cmd
		if proc%2 == 0 {
			cmd = exec.Command(os.Args[0], "-test.run=^TestCrossChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), envChild+"=1", envLib+"=redlock", envAddrs+"="+strings.Join(addrs, ","), envKey+"="+key, envInterop+"=1")
		} else {
			cmd = exec.Command("node", "bench.js")
			cmd.Dir = "node"
			cmd.Env = append(os.Environ(), "MODE=cross", "REDIS_ADDRS="+strings.Join(addrs, ","), "KEY="+key)
		}
		cmd.Env = append(cmd.Env,
			envProc+"="+strconv.Itoa(proc), "PROC="+strconv.Itoa(proc),
			envBegin+"="+strconv.FormatInt(begin.UnixNano(), 10), "BEGIN_NS="+strconv.FormatInt(begin.UnixNano(), 10),
			envDuration+"="+duration.String(), fmt.Sprintf("DURATION_MS=%d", duration.Milliseconds()),
			envOut+"="+out, "OUT="+out)
		return cmd
	})
}

// crossRun starts crossProcs children made by child, all to begin at one
// time, waits for them, and measures the grants they wrote.
func crossRun(t *testing.T, child func(proc int, begin time.Time, out string) *exec.Cmd) cross {
	dir := t.TempDir()
	begin := time.Now().Add(crossLead)
	cmds := make([]*exec.Cmd, crossProcs)
	outs := make([]string, crossProcs)
	logs := make([]bytes.Buffer, crossProcs)
	for p := range crossProcs {
		outs[p] = filepath.Join(dir, fmt.Sprintf("grants-%d.jsonl", p))
		cmds[p] = child(p, begin, outs[p])
		cmds[p].Stdout, cmds[p].Stderr = &logs[p], &logs[p]
		if err := cmds[p].Start(); err != nil {
			t.Fatalf("cross-process child %d: %v", p, err)
		}
	}
	var grants []grant
	for p, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("cross-process child %d (%s): %v\n%s", p, cmd, err, logs[p].Bytes())
			continue
		}
		f, err := os.Open(outs[p])
		if err != nil {
			t.Errorf("cross-process child %d: %v", p, err)
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var g grant
			if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
				t.Errorf("cross-process child %d: %q: %v", p, sc.Text(), err)
				break
			}
			grants = append(grants, g)
		}
		_ = f.Close()
	}
	return measure(grants)
}

// measure computes the figures of a cross-process run from its grants.
func measure(grants []grant) cross {
	c := cross{Grants: len(grants)}
	if len(grants) == 0 {
		return c
	}
	for _, g := range grants {
		if g.Proc >= 0 && g.Proc < crossProcs {
			c.PerProc[g.Proc]++
		}
	}
	// The run lasts from the first wait to the last release.
	first, last := grants[0].Start, grants[0].Released
	var held int64
	waits := make([]time.Duration, len(grants))
	for i, g := range grants {
		first, last = min(first, g.Start), max(last, g.Released)
		held += g.Released - g.Granted
		waits[i] = time.Duration(g.Granted - g.Start)
	}
	wall := float64(last - first)
	c.PerS = float64(len(grants)) / (wall / float64(time.Second))
	c.Busy = 100 * float64(held) / wall
	c.WaitP99 = p99ms(waits)

	// Violations: in the order of the grants, one that came before every
	// earlier holder had released. Only one goroutine holds at a time, so
	// the overlapping intervals are always of different holders.
	slices.SortFunc(grants, func(a, b grant) int { return cmp.Compare(a.Granted, b.Granted) })
	var releasedBy int64
	for i, g := range grants {
		if i > 0 && g.Granted < releasedBy {
			c.Violations++
		}
		releasedBy = max(releasedBy, g.Released)
	}

	// Overtakes: a grant to B overtook waiter A when A began waiting more
	// than overtakeMargin before B and was still waiting when B got the
	// lock (sA + margin < sB and gA > gB). In the order of the starts,
	// that is: the latest grant among the waits that began before
	// sB − margin is later than gB.
	slices.SortFunc(grants, func(a, b grant) int { return cmp.Compare(a.Start, b.Start) })
	latest := make([]int64, len(grants)) // latest[i]: max Granted of grants[:i+1]
	for i, g := range grants {
		latest[i] = g.Granted
		if i > 0 {
			latest[i] = max(latest[i], latest[i-1])
		}
	}
	for _, b := range grants {
		// n: how many waits began before sB − margin.
		n, _ := slices.BinarySearchFunc(grants, b.Start-int64(overtakeMargin), func(g grant, s int64) int {
			return cmp.Compare(g.Start, s)
		})
		if n > 0 && latest[n-1] > b.Granted {
			c.Overtakes++
		}
	}
	return c
}

// formatCross prints the second table.
func formatCross(rows []crossRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cross-process contended (%d processes × %d goroutines), one key, hold %v, think %v, %v per library\n\n",
		crossProcs, crossWaiters, hold, think, *duration)
	b.WriteString("| library | grants/s | busy % | overtakes (count, % of grants) | wait p99 | violations |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		pct := 0.0
		if r.Grants > 0 {
			pct = 100 * float64(r.Overtakes) / float64(r.Grants)
		}
		name := r.name
		if name == "redlock" {
			name = "**redlock**"
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f %% | %d, %.0f %% of %d | %.0f ms | %d |\n",
			name, r.PerS, r.Busy, r.Overtakes, pct, r.Grants, r.WaitP99, r.Violations)
	}
	fmt.Fprintf(&b, "\nOvertakes: grants to a waiter while another, which began waiting more than %v earlier (the time from recording the start to the first attempt on the wire), was still waiting.\n", overtakeMargin)
	return b.String()
}

// TestMeasure checks the cross-process figures on hand-made grants (times
// in ms).
func TestMeasure(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * float64(time.Millisecond)) }
	g := func(proc int, start, granted, released float64) grant {
		return grant{Proc: proc, Start: ms(start), Granted: ms(granted), Released: ms(released)}
	}
	tests := []struct {
		name   string
		grants []grant
		want   cross
	}{{
		name:   "in turn",
		grants: []grant{g(0, 0, 0, 1), g(1, 0.5, 1, 2), g(2, 1, 2, 3), g(3, 1.5, 3, 4)},
		want:   cross{Grants: 4, PerS: 1000, Busy: 100, WaitP99: 1.5, PerProc: [crossProcs]int{1, 1, 1, 1}},
	}, {
		// 2 got the lock while 1 and 3, which began waiting 2 and 1.5ms
		// earlier, still waited: one grant that overtook. 3 began within
		// the margin after 1, so its grant overtook no one.
		name:   "overtaken",
		grants: []grant{g(0, 0, 0, 1), g(1, 0, 4, 5), g(2, 2, 2, 3), g(3, 0.5, 3, 4)},
		want:   cross{Grants: 4, PerS: 800, Busy: 80, Overtakes: 1, WaitP99: 4, PerProc: [crossProcs]int{1, 1, 1, 1}},
	}, {
		// 1 and 2 came in while 0 held; overlapping holds count twice.
		name:   "overlap",
		grants: []grant{g(0, 0, 0, 3), g(1, 0, 1, 2), g(2, 0, 2.5, 4)},
		want:   cross{Grants: 3, PerS: 750, Busy: 137.5, Violations: 2, WaitP99: 2.5, PerProc: [crossProcs]int{1, 1, 1, 0}},
	}}
	for _, tt := range tests {
		if got := measure(tt.grants); got != tt.want {
			t.Errorf("%s: measure = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
