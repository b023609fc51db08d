package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// A node of Open's that is down makes go-redis log nothing: the Redlock
// tells its error handler and observer once when the node stops accepting
// connections, and its observer once when it starts again. The logger
// stays the user's (TestMain's, which keeps the lines): a client of the
// user's own over the same down node still logs there.
func TestOpenIsQuietAboutADownNode(t *testing.T) {
	t.Parallel()
	nodes := redistest.Start(t, 3)
	var list []string
	for _, nd := range nodes {
		list = append(list, nd.Addr())
	}
	var mu sync.Mutex
	var handled, changes []string
	obs := &redlock.Observer{Connection: func(ci redlock.ConnectionInfo) {
		mu.Lock()
		defer mu.Unlock()
		state := "up"
		if !ci.Up {
			state = "down: " + ci.Err.Error()
		}
		assert.Equal(t, nodes[ci.Node].Addr(), ci.Addr)
		changes = append(changes, state)
	}}
	onError := func(err error) {
		var ne *redlock.NodeError
		if errors.As(err, &ne) && ne.Op == redlock.OpConnect {
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, err.Error())
		}
	}
	rl, err := redlock.Open(strings.Join(list, ","), redlock.WithObserver(obs), redlock.WithErrorHandler(onError))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	own := redis.NewClient(&redis.Options{Addr: nodes[2].Addr(), MaxRetries: -1, DialerRetries: 1}) // the user's: its pool logs
	t.Cleanup(func() { _ = own.Close() })
	ctx := context.Background()

	calls := func(n int) {
		for i := range n {
			l, err := rl.Acquire(ctx, []string{"quiet"}, time.Second)
			if !assert.NoError(t, err, "call %d: two of three nodes answer", i) {
				return
			}
			_, err = l.Release(ctx)
			assert.NoError(t, err)
		}
	}
	calls(10) // every node up: connections made
	ownLines := 0
	start := time.Now()
	for round := range 2 {
		nodes[2].Kill()
		// Enough calls, from enough goroutines, to fill a go-redis pool
		// with failed dials (its size: 10 per CPU), for a second and a
		// half: the node is dialed again after a second.
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				end := time.Now().Add(1500 * time.Millisecond)
				for time.Now().Before(end) {
					calls(1)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, ownLines, loggedAbout(nodes[2].Addr()), "round %d: go-redis's lines about the down node", round)
		if round == 0 {
			for range 30 {
				_ = own.Ping(ctx).Err()
			}
			ownLines = loggedAbout(nodes[2].Addr())
			require.Positive(t, ownLines, "the user's own client logs to the user's logger")
		}
		t.Logf("round %d: node down, calls made: %v", round, time.Since(start))
		nodes[2].Restart()
		t.Logf("round %d: node restarted: %v", round, time.Since(start))
		require.Eventually(t, func() bool {
			calls(1)
			mu.Lock()
			defer mu.Unlock()
			return len(changes) == 2*round+2
		}, 10*time.Second, 10*time.Millisecond, "the node's return told")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, changes, 4, "one report per change: %q", changes)
	for i, c := range changes {
		if i%2 == 0 {
			// A dial to a port whose process is being killed is refused, or
			// reset while the kernel tears the socket down (seen beside a
			// CPU load).
			assert.Regexp(t, "connection refused|connection reset", c)
		} else {
			assert.Equal(t, "up", c)
		}
	}
	require.Len(t, handled, 2, "the error handler hears each stop once: %q", handled)
	assert.Contains(t, handled[0], "redlock: connect on node 2 ("+nodes[2].Addr()+"): ")
}
