package redlocktest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newRedlock returns a Redlock over nodes' clients, closed when the test
// ends (before the nodes, whose Close t.Cleanup registered first). Its node
// timeout is 500ms (the longest the default extension threshold allows)
// unless opts say otherwise: a -race run on a machine busy with other work
// can take longer than the default 100ms to answer, and only the tests of
// timeouts want a node's vote to miss it.
func newRedlock(t *testing.T, nodes *redlocktest.Nodes, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond)}, opts...)
	rl, err := redlock.New(nodes.Clients(), opts...)
	require.NoError(t, err, "redlock.New(nodes.Clients())")
	t.Cleanup(func() { _ = rl.Close() })
	return rl
}

func TestStartRefusesNoNodes(t *testing.T) {
	for _, n := range []int{0, -1} {
		nodes, err := redlocktest.Start(n)
		require.Error(t, err, "Start(%d)", n)
		assert.Nil(t, nodes, "Start(%d)", n)
		assert.Contains(t, err.Error(), fmt.Sprintf("Start(%d)", n))
		assert.Contains(t, err.Error(), "1 or more")
	}
}

// fatalTB records New's call of Fatal, which ends only New's goroutine.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestNewFailsTheTest(t *testing.T) {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redlocktest.New(tb, 0)
		t.Error("New(tb, 0) returned")
	}()
	<-done
	assert.Contains(t, tb.msg, "Start(0)")
}

// New closes the nodes when its test ends: the kit's methods then say so.
func TestNewClosesAtCleanup(t *testing.T) {
	var nodes *redlocktest.Nodes
	t.Run("user", func(t *testing.T) {
		nodes = redlocktest.New(t, 2)
		require.NoError(t, nodes.Clients()[0].Ping(context.Background()).Err())
	})
	assert.Len(t, strings.Split(nodes.List(), ","), 2, "List() after Close")
	assert.PanicsWithValue(t, "redlocktest: Clients() after Close", func() { nodes.Clients() })
	err := nodes.Lose("r")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "after Close")
	_, err = net.DialTimeout("tcp", nodes.Addrs()[0], time.Second)
	assert.Error(t, err, "dial a closed node")
}

func TestAddressesAndClients(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	addrs := nodes.Addrs()
	require.Len(t, addrs, 3)
	assert.Equal(t, strings.Join(addrs, ","), nodes.List())
	seen := map[string]bool{}
	for _, a := range addrs {
		assert.True(t, strings.HasPrefix(a, "127.0.0.1:"), "Addrs() = %v", addrs)
		assert.False(t, seen[a], "Addrs() repeats %s", a)
		seen[a] = true
	}
	addrs[0] = "changed"
	assert.NotEqual(t, "changed", nodes.Addrs()[0], "Addrs() shares its slice")

	clients := nodes.Clients()
	require.Len(t, clients, 3)
	clients[0] = nil
	again := nodes.Clients()
	require.NotNil(t, again[0], "Clients() shares its slice")
	for i, c := range again {
		rc, ok := c.(*redis.Client)
		require.True(t, ok, "Clients()[%d] is a %T", i, c)
		assert.Equal(t, nodes.Addrs()[i], rc.Options().Addr, "Clients()[%d]'s address", i)
		assert.NoError(t, c.Ping(context.Background()).Err(), "Clients()[%d].Ping", i)
	}
	assert.Same(t, again[1], nodes.Clients()[1], "Clients() makes new clients")

	// Each node is its own server: a key set on one is on no other.
	require.NoError(t, again[0].Set(context.Background(), "k", "v", 0).Err())
	assert.Equal(t, redis.Nil, again[1].Get(context.Background(), "k").Err())
}

func TestBadInputPanics(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	faults := map[string]func(int){"Down": nodes.Down, "Hang": nodes.Hang, "Heal": nodes.Heal, "Restart": nodes.Restart}
	for name, f := range faults {
		for _, i := range []int{-1, 3} {
			want := fmt.Sprintf("redlocktest: %s(%d): index out of range [%d] with 3 nodes (0 to 2)", name, i, i)
			assert.PanicsWithValue(t, want, func() { f(i) })
		}
	}
	// The nodes are unharmed.
	rl := newRedlock(t, nodes)
	lock, err := rl.Acquire(context.Background(), []string{"r"}, time.Second)
	require.NoError(t, err)
	assert.Len(t, lock.Attempts()[0].VotesFor, 2)

	var none *redlocktest.Nodes
	assert.PanicsWithValue(t, "redlocktest: Down(0) on a nil *Nodes: use Start or New", func() { none.Down(0) })

	require.NoError(t, rl.Close())
	nodes.Close()
	for name, f := range faults {
		assert.PanicsWithValue(t, "redlocktest: "+name+"(1) after Close", func() { f(1) })
		assert.PanicsWithValue(t, "redlocktest: "+name+"(7) after Close", func() { f(7) })
	}
	assert.PanicsWithValue(t, "redlocktest: Clients() after Close", func() { nodes.Clients() })
	assert.Len(t, nodes.Addrs(), 3)
}

// Close returns at once whatever the faults, a call parked on a hung node
// included, is idempotent and safe to call concurrently, and leaves no
// goroutine of the kit behind.
func TestCloseIsBoundedAndIdempotent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	nodes, err := redlocktest.Start(3)
	require.NoError(t, err)
	rl, err := redlock.New(nodes.Clients())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = rl.Acquire(ctx, []string{"warm"}, time.Second) // every client connected
	require.NoError(t, err)

	raw, err := net.Dial("tcp", nodes.Addrs()[0])
	require.NoError(t, err)
	defer raw.Close()
	nodes.Hang(0)
	nodes.Hang(1)
	nodes.Down(2)
	parked := make(chan error, 1)
	go func() {
		// A node timeout far longer than the test: the call waits on the
		// hung nodes until Close cuts them.
		_, err := rl.Acquire(ctx, []string{"r"}, time.Minute, redlock.WithRetryCount(0), redlock.WithNodeTimeout(30*time.Second))
		parked <- err
	}()
	time.Sleep(50 * time.Millisecond) // the call is on its way to the hung nodes

	start := time.Now()
	dumped := make(chan struct{})
	go func() {
		select {
		case <-dumped:
		case <-time.After(2 * time.Second):
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		}
	}()
	defer close(dumped)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); nodes.Close() }()
	}
	wg.Wait()
	took := time.Since(start)
	assert.Less(t, took, time.Second, "Close() with two nodes hung and one down took %v", took)
	t.Logf("Close() with a call parked on two hung nodes: %v", took)
	nodes.Close()

	select {
	case err := <-parked:
		assert.Error(t, err, "Acquire on closed nodes")
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire parked on a hung node did not end within 5s of Close")
	}
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(time.Second)))
	_, err = raw.Read(make([]byte, 1))
	assert.Error(t, err, "a connection through a hung proxy after Close")
	_ = rl.Close()
}

// The faults, Lose and the clients' calls race freely (run with -race).
func TestFaultsRaceWithCalls(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes, redlock.WithNodeTimeout(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res := fmt.Sprint("r", w)
				if lock, err := rl.Acquire(ctx, []string{res}, 200*time.Millisecond, redlock.WithRetryCount(0)); err == nil {
					_ = nodes.Lose(res)
					_, _ = lock.Release(context.Background())
				}
			}
		}()
	}
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				nodes.Hang(i)
				time.Sleep(5 * time.Millisecond)
				nodes.Down(i)
				time.Sleep(5 * time.Millisecond)
				nodes.Restart(i)
				nodes.Heal(i)
				time.Sleep(5 * time.Millisecond)
				_ = nodes.List()
				_ = nodes.Clients()
			}
		}()
	}
	wg.Wait()
	for i := range 3 {
		nodes.Heal(i)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	_, err := newRedlock(t, nodes).Acquire(ctx2, []string{"after"}, time.Second)
	assert.NoError(t, err, "Acquire once every node is healed")
}
