package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
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

// The herd workload: N waiters over P processes wait for one key, hold it
// 1ms (hold) and release it with no think time, for -duration. What it
// measures is the cost of a crowd of waiters: the node commands and the
// client CPU each grant takes.
var herdSizes = flag.String("herd", "100x1,1000x10", "the herd workload's sizes, comma-separated waiters x processes")

const (
	// herdNodes is how many of the nodes the herd and holders workloads
	// use (the figures are on 3).
	herdNodes = 3
	// herdLead is how far ahead the parent sets the common start time: up
	// to 10 processes of the test binary start on 2 cores.
	herdLead = 2 * time.Second
	// envWaiters is the goroutines of a herd child.
	envWaiters = "BENCH_WAITERS"
)

// herdLibraries is the herd workload's rows, by their names in libraries.
var herdLibraries = []string{"redlock", "redlock, fair queue (WithFairQueue(true))", "redsync v4.18.1"}

// herdSize is one size of the herd workload.
type herdSize struct{ waiters, procs int }

// parseHerd parses -herd.
func parseHerd(s string) ([]herdSize, error) {
	var sizes []herdSize
	for _, f := range strings.Split(s, ",") {
		w, p, ok := strings.Cut(strings.TrimSpace(f), "x")
		n, err1 := strconv.Atoi(w)
		np, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || n < 1 || np < 1 || n < np {
			return nil, fmt.Errorf("-herd: %q is not waiters x processes, as 1000x10", f)
		}
		sizes = append(sizes, herdSize{n, np})
	}
	return sizes, nil
}

// herdRow is one line of the herd table.
type herdRow struct {
	size       herdSize
	name       string
	grants     int
	wall       time.Duration // from the common start to the last child's exit
	commands   int64         // node commands, over the nodes
	cpu        time.Duration // the children's user+sys
	violations int
}

// TestHerdChild is one process of the herd workload, run by herdRun with
// the environment of the cross-process children (envWaiters goroutines);
// it is skipped otherwise.
func TestHerdChild(t *testing.T) {
	if os.Getenv(envChild) != "1" || os.Getenv(envWaiters) == "" {
		t.Skip("a child of the herd workload: TestCompare runs it")
	}
	name := os.Getenv(envLib)
	i := slices.IndexFunc(libraries, func(l library) bool { return l.name == name })
	if i < 0 {
		t.Fatalf("%s=%q: no such library", envLib, name)
	}
	proc, err1 := strconv.Atoi(os.Getenv(envProc))
	begin, err2 := strconv.ParseInt(os.Getenv(envBegin), 10, 64)
	d, err3 := time.ParseDuration(os.Getenv(envDuration))
	n, err4 := strconv.Atoi(os.Getenv(envWaiters))
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		t.Fatalf("herd child environment: %v %v %v %v", err1, err2, err3, err4)
	}
	addrs := strings.Split(os.Getenv(envAddrs), ",")
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: n + 16})
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
	// A wait still going at the end is cut by ctx: the run ends on time,
	// whatever the library's retry delays.
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				start := time.Now()
				unlock, err := l.Lock(ctx, key, ttl, true)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s: lock: %v", key, err)
					}
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

// herd runs the herd workload on addrs for every size of -herd and every
// selected row of herdLibraries, and returns its table. A violation fails
// the test.
func herd(t *testing.T, addrs []string) string {
	sizes, err := parseHerd(*herdSizes)
	if err != nil {
		t.Fatalf("%v", err)
	}
	admin := adminClients(t, addrs)
	var rows []herdRow
	for _, size := range sizes {
		for _, name := range herdLibraries {
			if !selected(name) {
				continue
			}
			r := herdRun(t, name, addrs, admin, size)
			rows = append(rows, r)
			t.Logf("herd %dx%d, %s: %+v", size.waiters, size.procs, name, r)
			if r.violations > 0 {
				t.Errorf("herd %dx%d, %s: %d mutual-exclusion violations", size.waiters, size.procs, name, r.violations)
			}
		}
	}
	return formatHerd(rows)
}

// herdRun runs one row: size.procs children of this test binary, the
// waiters spread over them, all to begin at one time. It deletes the key
// once they have exited.
func herdRun(t *testing.T, name string, addrs []string, admin []*redis.Client, size herdSize) herdRow {
	dir := t.TempDir()
	key := fmt.Sprintf("herd:%dx%d:%s", size.waiters, size.procs, name)
	cmds := make([]*exec.Cmd, size.procs)
	outs := make([]string, size.procs)
	logs := make([]bytes.Buffer, size.procs)
	before := nodeCommands(t, admin)
	begin := time.Now().Add(herdLead)
	for p := range size.procs {
		n := size.waiters / size.procs
		if p < size.waiters%size.procs {
			n++
		}
		outs[p] = filepath.Join(dir, fmt.Sprintf("grants-%d.jsonl", p))
		cmd := exec.Command(os.Args[0], "-test.run=^TestHerdChild$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			envChild+"=1",
			envWaiters+"="+strconv.Itoa(n),
			envLib+"="+name,
			envAddrs+"="+strings.Join(addrs, ","),
			envKey+"="+key,
			envProc+"="+strconv.Itoa(p),
			envBegin+"="+strconv.FormatInt(begin.UnixNano(), 10),
			envDuration+"="+duration.String(),
			envOut+"="+outs[p])
		cmd.Stdout, cmd.Stderr = &logs[p], &logs[p]
		if err := cmd.Start(); err != nil {
			t.Fatalf("herd child %d: %v", p, err)
		}
		cmds[p] = cmd
	}
	r := herdRow{size: size, name: name}
	var grants []grant
	for p, cmd := range cmds {
		err := cmd.Wait()
		if cmd.ProcessState != nil {
			r.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		if err != nil {
			t.Errorf("herd child %d (%s): %v\n%s", p, name, err, logs[p].Bytes())
			continue
		}
		gs, err := readGrants(outs[p])
		if err != nil {
			t.Errorf("herd child %d (%s): %v", p, name, err)
		}
		grants = append(grants, gs...)
	}
	r.wall = time.Since(begin)
	// The first INFO is counted in the second's figure (a command counts
	// once it has run), the second is not.
	r.commands = nodeCommands(t, admin) - before - int64(len(admin))
	r.grants = len(grants)
	r.violations = measure(grants).Violations
	for _, c := range admin {
		if err := c.Del(context.Background(), key).Err(); err != nil {
			t.Errorf("herd: deleting %s: %v", key, err)
		}
	}
	return r
}

// readGrants reads the grants a child wrote, one JSON line each.
func readGrants(path string) ([]grant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var grants []grant
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var g grant
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			return grants, fmt.Errorf("%q: %v", sc.Text(), err)
		}
		grants = append(grants, g)
	}
	return grants, sc.Err()
}

// adminClients returns one client per node of addrs, for INFO and DEL,
// closed when the test ends.
func adminClients(t *testing.T, addrs []string) []*redis.Client {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: 1})
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs
}

// nodeCommands returns total_commands_processed of INFO stats, summed over
// the nodes of cs.
func nodeCommands(t *testing.T, cs []*redis.Client) int64 {
	var sum int64
	for _, c := range cs {
		info, err := c.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatalf("INFO stats of %s: %v", c.Options().Addr, err)
		}
		found := false
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO stats of %s: %q: %v", c.Options().Addr, line, err)
				}
				sum, found = sum+n, true
			}
		}
		if !found {
			t.Fatalf("INFO stats of %s: no total_commands_processed", c.Options().Addr)
		}
	}
	return sum
}

// formatHerd prints the herd table.
func formatHerd(rows []herdRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "herd: N waiters over P processes, one key, hold %v, no think time, ttl %v, %d local nodes, %v per row\n\n",
		hold, ttl, herdNodes, *duration)
	b.WriteString("| size (waiters x processes) | library | grants/s | node commands per grant | client CPU µs per grant | client CPU % of one core | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		perGrant := func(v float64) string {
			if r.grants == 0 {
				return "– (no grant)"
			}
			return fmt.Sprintf("%.1f", v/float64(r.grants))
		}
		fmt.Fprintf(&b, "| %dx%d | %s | %.0f | %s | %s | %.0f %% | %d |\n",
			r.size.waiters, r.size.procs, r.name, float64(r.grants)/r.wall.Seconds(),
			perGrant(float64(r.commands)), perGrant(float64(r.cpu)/float64(time.Microsecond)),
			100*float64(r.cpu)/float64(r.wall), r.violations)
	}
	b.WriteString("\nNode commands: total_commands_processed of INFO stats, summed over the nodes, from before the children start to after they exit (connection handshakes included). Client CPU: the children's user+sys over their whole life (start-up included), per grant and over the wall time from the common start to the last exit.\n")
	return b.String()
}
