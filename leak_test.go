package redlock_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

// quiet drops go-redis's own log lines (dial retries against the nodes the
// tests kill on purpose), keeping them for the tests that count them
// (redlock_open_test.go): the user's own logger, which Open must leave alone.
type quiet struct{}

var (
	logMu    sync.Mutex
	logLines []string
)

func (quiet) Printf(_ context.Context, format string, v ...any) {
	logMu.Lock()
	defer logMu.Unlock()
	logLines = append(logLines, fmt.Sprintf(format, v...))
}

// loggedAbout returns how many of go-redis's log lines so far name addr.
func loggedAbout(addr string) int {
	logMu.Lock()
	defer logMu.Unlock()
	n := 0
	for _, l := range logLines {
		if strings.Contains(l, addr) {
			n++
		}
	}
	return n
}

// TestMain fails the package if any goroutine outlives the tests: every
// goroutine redlock starts must have an owner and end.
//
// It also starts the three in-memory nodes that the Examples run on, and
// sets REDLOCK_NODES to their list: an Example gets its nodes as a
// program would, with redlock.Open(os.Getenv("REDLOCK_NODES")). The list
// is always the embedded nodes', never one from the environment, so that
// no Example touches a real deployment. The nodes stop after the tests,
// before goleak looks for goroutines left over.
func TestMain(m *testing.M) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" {
		// Every other attempt's state that would be reused is marked
		// released instead: a handler that reads one afterwards panics.
		redlock.PoisonStates(true)
	}
	redis.SetLogger(quiet{})
	nodes, err := redlocktest.Start(3)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the Examples' nodes:", err)
		os.Exit(1)
	}
	if err := os.Setenv("REDLOCK_NODES", nodes.List()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(runThenStop{m, nodes.Close}, goIgnoreRedial)
}

// runThenStop runs the tests, then stop, before goleak's check.
type runThenStop struct {
	m    *testing.M
	stop func()
}

func (r runThenStop) Run() int {
	defer r.stop()
	return r.m.Run()
}

// goIgnoreRedial ignores go-redis's own redial probe: once a pool has failed
// to dial PoolSize times (the tests kill and refuse nodes on purpose), it
// starts a goroutine that redials every second and returns within a second
// of the client's Close. It is not ours to end.
var goIgnoreRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
