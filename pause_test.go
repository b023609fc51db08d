package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// A client stopped for three node timeouts while its calls were out does not
// count its own pause against the nodes: their answers, which came
// meanwhile, wait in its sockets. Each node's vote is its answer, no node's
// breaker opens, and every call succeeds. Before the pause was measured,
// each stop timed out the nodes whose round was out (the watchdog, due
// during the stop, ran before the reader).
//
// Not parallel: it stops the whole process, and every test beside it.
func TestPausedClientDoesNotBlameTheNodes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGSTOP")
	}
	const timeout = 100 * time.Millisecond
	var mu sync.Mutex
	var timedOut []error
	obs := &redlock.Observer{Vote: func(e *redlock.NodeError) {
		var nte *redlock.NodeTimeoutError
		if errors.As(e, &nte) {
			mu.Lock()
			timedOut = append(timedOut, e)
			mu.Unlock()
		}
	}}
	f := newNodes(t, 3, redlock.WithNodeTimeout(timeout), redlock.WithObserver(obs))
	warm(t, f.rl)
	ctx := context.Background()
	var failed []error
	for stop := range 4 {
		done := redistest.StopProcess(t, 50*time.Millisecond, 3*timeout)
		var gap time.Duration // the longest time between two calls' ends: the stop
		last := time.Now()
		for running := true; running; {
			select {
			case <-done:
				running = false
			default:
			}
			lock, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}paused%d", stop)}, time.Minute)
			if err == nil {
				_, err = lock.Release(ctx)
			}
			if err != nil {
				failed = append(failed, err)
			}
			now := time.Now()
			gap, last = max(gap, now.Sub(last)), now
		}
		// The stop fell between calls' ends: the loop saw it, so calls
		// were out during it (a call takes well under a millisecond).
		require.GreaterOrEqual(t, gap, 2*timeout, "stop %d: the process was not stopped while the loop ran", stop)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, failed, "Acquire and Release across 4 stops of %v", 3*timeout)
	assert.Empty(t, timedOut, "node votes that timed out across 4 stops of %v", 3*timeout)
}

// spin keeps n goroutines busy until the test ends: a client whose own
// goroutines take every CPU, so that its timers all run late.
func spin(t *testing.T, n int) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; !stop.Load(); x++ {
			}
		}()
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
}

// nodeTimedOut returns an Observer and the time of node i's first
// NodeTimeoutError vote (zero until it came).
func nodeTimedOut(i int) (*redlock.Observer, *atomic.Int64) {
	var at atomic.Int64
	return &redlock.Observer{Vote: func(e *redlock.NodeError) {
		var nte *redlock.NodeTimeoutError
		if e.Node == i && errors.As(e, &nte) {
			at.CompareAndSwap(0, time.Now().UnixNano())
		}
	}}, &at
}

// A hung node is found on a client kept busy by its own goroutines (8
// spinning on 2 cores): its timers run late for as long as it is busy,
// and what the pause adds to a wait is capped at 4 node timeouts. (Before
// the cap, the busy client's lateness counted as a pause of 52-99% of the
// time, and the watchdog waited for ever: no timeout in 30s. Before the
// pause was measured: 179ms.)
//
// Not parallel: it takes every CPU.
func TestHungNodeFoundOnABusyClient(t *testing.T) {
	const timeout = 100 * time.Millisecond
	obs, at := nodeTimedOut(2)
	f := newFixture(t, redistest.Setup{Nodes: 3, Client: redistest.NoClientTimeouts},
		redlock.WithNodeTimeout(timeout), redlock.WithRetryCount(0), redlock.WithObserver(obs))
	warm(t, f.rl)
	f.Nodes[2].Pause()
	defer f.Nodes[2].Resume()
	spin(t, 8)
	ctx := context.Background()
	begin := time.Now()
	for i := 0; at.Load() == 0 && time.Since(begin) < 10*time.Second; i++ {
		if l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}busy%d", i)}, 10*time.Second); err == nil {
			_, _ = l.Release(ctx)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, at.Load(), "node 2 (stopped) never timed out in 10s on a busy client")
	// The bound: 5 node timeouts, and the loaded machine's scheduling.
	assert.Less(t, time.Unix(0, at.Load()).Sub(begin), 1500*time.Millisecond, "node 2's first timeout after the first call")
}

// A hung node whose round went out just before the client was stopped for
// 500ms times out once the client runs again: a pause is added to the
// wait once, not again from the moment the watchdog ran late (that waited
// the stop out twice: 1.04s).
//
// Not parallel: it stops the whole process, and every test beside it.
func TestHungNodeFoundAfterTheClientsStop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGSTOP")
	}
	const timeout, stop = 100 * time.Millisecond, 500 * time.Millisecond
	obs, at := nodeTimedOut(2)
	f := newFixture(t, redistest.Setup{Nodes: 3, Client: redistest.NoClientTimeouts},
		redlock.WithNodeTimeout(timeout), redlock.WithRetryCount(0), redlock.WithObserver(obs))
	warm(t, f.rl)
	f.Nodes[2].Pause()
	defer f.Nodes[2].Resume()
	done := redistest.StopProcess(t, 40*time.Millisecond, stop)
	begin := time.Now()
	l, err := f.rl.Acquire(context.Background(), []string{"{redlock}stopped"}, 10*time.Second)
	require.NoError(t, err, "Acquire with node 2 hung")
	defer func() { _, _ = l.Release(context.Background()) }()
	<-done
	require.Eventually(t, func() bool { return at.Load() != 0 }, 5*time.Second, time.Millisecond, "node 2 never timed out")
	took := time.Unix(0, at.Load()).Sub(begin)
	require.GreaterOrEqual(t, time.Since(begin), stop, "the process was not stopped")
	// Due at 100ms + the pause (at most 400ms), both inside the stop:
	// found when the client runs again, at about 540ms.
	assert.Less(t, took, stop+2*timeout+100*time.Millisecond, "node 2's timeout after the call began")
}

// A timeout's error says how long this process was paused while it
// waited, when it was.
func TestNodeTimeoutSaysThePause(t *testing.T) {
	t.Parallel()
	e := &redlock.NodeTimeoutError{Timeout: 100 * time.Millisecond, Paused: 700 * time.Millisecond}
	assert.Contains(t, e.Error(), "this process was paused 700ms meanwhile", "NodeTimeoutError with Paused")
	assert.NotContains(t, (&redlock.NodeTimeoutError{Timeout: 100 * time.Millisecond}).Error(), "paused", "NodeTimeoutError without")
}
