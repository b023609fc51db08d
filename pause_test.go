package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// stopProcess stops this whole process, every goroutine at once, for d, d
// after it is called: what a long garbage collection, a machine short of
// CPU or a VM's steal does to a client. A child shell sends the signals.
// The returned channel is closed once the process runs again.
func stopProcess(t *testing.T, after, d time.Duration) <-chan struct{} {
	t.Helper()
	pid := os.Getpid()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("sleep %.3f; kill -STOP %d; sleep %.3f; kill -CONT %d",
		after.Seconds(), pid, d.Seconds(), pid))
	require.NoError(t, cmd.Start(), "start the shell that stops this process")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { <-done })
	return done
}

// A client stopped for three node timeouts while its calls were out does not
// count its own pause against the nodes: their answers, which came
// meanwhile, wait in its sockets. Each node's vote is its answer, no node's
// breaker opens, and every call succeeds. Before the pause was measured,
// each stop timed out the nodes whose round was out (the watchdog, due
// during the stop, ran before the reader).
//
// Not parallel: it stops every test of the process.
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
		done := stopProcess(t, 50*time.Millisecond, 3*timeout)
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
