package benchmarks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// The holders workload: N calls of Using in this process hold N distinct
// keys, ttl 2s, for -duration: what keeping many locks costs the nodes
// (extensions) and the client (CPU, memory, goroutines). Redlock only.
var holdersSizes = flag.String("holders", "1000,20000", "the holders workload's sizes, comma-separated counts of locks held")

const (
	holdersTTL  = 2 * time.Second
	holdersPool = 256 // go-redis PoolSize per node
)

// holdersRow is one line of the holders table.
type holdersRow struct {
	n          int
	ramp       time.Duration // from the start of the goroutines to all acquired or failed
	window     time.Duration
	commands   int64 // node commands over the window, over the nodes
	extensions int64 // Extend calls Using made over the window
	cpu        time.Duration
	heap       float64 // bytes of HeapInuse per held lock
	goroutines float64 // per held lock
	lost       int64   // fn's ctx ended before the window's end
	failed     int64   // the acquire failed
	usingErrs  int64   // Using returned another error (a release's)
}

// parseHolders parses -holders.
func parseHolders(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-holders: %q is not a count of locks", f)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// holders runs the holders workload on addrs for every size of -holders
// and returns its table.
func holders(t *testing.T, addrs []string) string {
	sizes, err := parseHolders(*holdersSizes)
	if err != nil {
		t.Fatalf("%v", err)
	}
	admin := adminClients(t, addrs)
	var rows []holdersRow
	for _, n := range sizes {
		r := holdersRun(t, addrs, admin, n)
		rows = append(rows, r)
		t.Logf("holders %d: %+v", n, r)
	}
	return formatHolders(rows)
}

// holdersRun holds n locks with Using and measures the window of -duration
// once all are acquired (or failed).
func holdersRun(t *testing.T, addrs []string, admin []*redis.Client, n int) holdersRow {
	r := holdersRow{n: n}
	var extensions atomic.Int64
	obs := &redlock.Observer{Done: func(ci redlock.CallInfo) {
		if ci.Op == redlock.OpExtend {
			extensions.Add(1)
		}
	}}
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, PoolSize: holdersPool})
	}
	rl, err := redlock.New(clients, redlock.WithObserver(obs))
	if err != nil {
		t.Fatalf("holders: redlock.New: %v", err)
	}
	defer closeRow(redlockLocker{rl}, clients)

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{}) // closed at the window's end
	var ready sync.WaitGroup    // each holder: acquired or failed
	var done sync.WaitGroup     // each Using returned
	var lost, failed, usingErrs atomic.Int64
	rampStart := time.Now()
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ran := false
			err := rl.Using(ctx, []string{"holders:" + strconv.Itoa(i)}, holdersTTL, func(fctx context.Context) error {
				ran = true
				ready.Done()
				select {
				case <-stop:
					return nil
				case <-fctx.Done():
					select {
					case <-stop:
					default:
						if lost.Add(1) <= 3 {
							t.Logf("holders %d: lost holders:%d: %v", n, i, context.Cause(fctx))
						}
					}
					return context.Cause(fctx)
				}
			})
			switch {
			case !ran:
				failed.Add(1)
				ready.Done()
				if failed.Load() <= 3 {
					t.Logf("holders %d: acquire of holders:%d: %v", n, i, err)
				}
			case err != nil && !errors.Is(err, redlock.ErrExtensionFailed):
				if usingErrs.Add(1) <= 3 {
					t.Logf("holders %d: Using of holders:%d: %v", n, i, err)
				}
			}
		}()
	}
	ready.Wait()
	r.ramp = time.Since(rampStart)

	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	if held := n - int(failed.Load()) - int(lost.Load()); held > 0 {
		r.heap = float64(int64(m1.HeapInuse)-int64(m0.HeapInuse)) / float64(held)
		r.goroutines = float64(g1-g0) / float64(held)
	}

	before := nodeCommands(t, admin)
	ext0 := extensions.Load()
	cpu0 := cpuTime(t)
	begin := time.Now()
	time.Sleep(*duration)
	r.window = time.Since(begin)
	r.cpu = cpuTime(t) - cpu0
	r.extensions = extensions.Load() - ext0
	r.commands = nodeCommands(t, admin) - before - int64(len(admin))

	// The window's end: every fn returns and its Using releases, then the
	// rest (a Using still acquiring, if any) is cancelled.
	close(stop)
	done.Wait()
	cancel()
	r.lost, r.failed, r.usingErrs = lost.Load(), failed.Load(), usingErrs.Load()
	return r
}

// cpuTime returns this process's user+sys CPU time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// formatHolders prints the holders table.
func formatHolders(rows []holdersRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "holders: N calls of Using in one process (redlock), distinct keys, ttl %v, %d local nodes, go-redis PoolSize %d, %v window once all are held\n\n",
		holdersTTL, herdNodes, holdersPool, *duration)
	b.WriteString("| locks held | ramp-up | node commands/s | extensions/s | node commands per extension | client CPU % of one core | heap per held lock | goroutines per held lock | lost | failed acquires |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		perExt := "–"
		if r.extensions > 0 {
			perExt = fmt.Sprintf("%.2f", float64(r.commands)/float64(r.extensions))
		}
		fmt.Fprintf(&b, "| %d | %.1f s | %.0f | %.0f | %s | %.0f %% | %.1f KiB | %.2f | %d | %d |\n",
			r.n, r.ramp.Seconds(), float64(r.commands)/r.window.Seconds(), float64(r.extensions)/r.window.Seconds(), perExt,
			100*float64(r.cpu)/float64(r.window), r.heap/1024, r.goroutines, r.lost, r.failed)
	}
	for _, r := range rows {
		if r.usingErrs > 0 {
			fmt.Fprintf(&b, "\n%d locks: %d calls of Using returned an error after the window (a release's; see the log).\n", r.n, r.usingErrs)
		}
	}
	b.WriteString("\nNode commands: total_commands_processed of INFO stats over the window, summed over the nodes. Extensions: the Extend calls Using made (Observer.Done). Heap: HeapInuse after runtime.GC, all held, minus before any was taken. Client CPU: getrusage of this process over the window. Lost: fn's context ended before the window's end.\n")
	return b.String()
}
