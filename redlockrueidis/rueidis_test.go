package redlockrueidis_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/driver/drivertest"
	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/redlockrueidis"
)

// rueidis's nodes pass the checks go-redis's do; Dial's, the check of a
// node down at the start.
func TestRueidis(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Node: func(tb testing.TB, addr string) driver.Node {
			return redlockrueidis.Node(client(tb, rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true}))
		},
		Cluster: func(tb testing.TB, addrs []string) driver.Node {
			return redlockrueidis.Node(client(tb, rueidis.ClientOption{InitAddress: addrs}))
		},
		Down: func(tb testing.TB, addr string) driver.Node {
			return dial(tb, addr)
		},
	})
}

func client(tb testing.TB, o rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// dial returns Dial's node of addr, closed when the test ends.
func dial(tb testing.TB, addr string) *redlockrueidis.DialedNode {
	tb.Helper()
	n, err := redlockrueidis.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Close)
	return n
}

// Dial's node of a server that is down: its calls and its subscriptions
// fail at once with a *DialError naming the address and the dial's error;
// once the server is up, both go through.
func TestDial(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, 1)[0]
	srv.Kill()
	n := dial(t, srv.Addr())
	if got := n.Info(); got.Addr != srv.Addr() || !got.OneServer || len(got.Servers) != 1 || got.Servers[0] != srv.Addr() {
		t.Fatalf("Info() of a node down = %+v, want its address, OneServer", got)
	}
	start := time.Now()
	cmd := &driver.Cmd{Args: []any{"PING"}}
	n.Do(ctx, []*driver.Cmd{cmd})
	var de *redlockrueidis.DialError
	if !errors.As(cmd.Err, &de) || de.Addr != srv.Addr() {
		t.Fatalf("Do(PING) on a node down = %v, want a *DialError naming %s", cmd.Err, srv.Addr())
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Do(PING) on a node down took %v, want it at once", took)
	}
	sub := n.Subscribe(ctx, "ch", false)
	if _, err := sub.Receive(ctx); !errors.As(err, &de) {
		t.Fatalf("Receive of a subscription on a node down = %v, want a *DialError", err)
	}
	_ = sub.Close()

	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := &driver.Cmd{Args: []any{"PING"}}
		n.Do(ctx, []*driver.Cmd{cmd})
		if cmd.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Do(PING) 10s after the server started: %v", cmd.Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sub = n.Subscribe(ctx, "ch", false)
	defer sub.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ev, err := sub.Receive(rctx); err != nil || ev.Kind != driver.Subscribed {
		t.Fatalf("Receive of a subscription once connected = %+v, %v; want Subscribed", ev, err)
	}
	if err := srv.Client().Publish(ctx, "ch", "hi").Err(); err != nil {
		t.Fatal(err)
	}
	if ev, err := sub.Receive(rctx); err != nil || ev.Kind != driver.Message || ev.Payload != "hi" {
		t.Fatalf("Receive after PUBLISH ch hi = %+v, %v; want the message", ev, err)
	}
}

// Close ends the dials of a node that never connected at once, leaving no
// goroutine, and its calls after Close fail with driver.ErrClosed. (Not
// parallel: it counts the goroutines.)
func TestDialClose(t *testing.T) {
	srv := redistest.Start(t, 1)[0]
	srv.Kill()
	before := runtime.NumGoroutine()
	n, err := redlockrueidis.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the dials are backing off
	start := time.Now()
	n.Close()
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("Close of a node dialing in the background took %v", took)
	}
	n.Close() // idempotent
	// Goroutines of the tests before (a client's closing) may still be
	// ending: the count may take a moment to come down.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before Dial:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
	cmd := &driver.Cmd{Args: []any{"PING"}}
	n.Do(context.Background(), []*driver.Cmd{cmd})
	if !errors.Is(cmd.Err, driver.ErrClosed) {
		t.Fatalf("Do(PING) after Close = %v, want driver.ErrClosed", cmd.Err)
	}
}

// Dial refuses what it cannot make a node of without a connection.
func TestDialRefuses(t *testing.T) {
	for _, o := range []rueidis.ClientOption{
		{},
		{InitAddress: []string{"127.0.0.1:7000", "127.0.0.1:7001"}},
		{Sentinel: rueidis.SentinelOption{MasterSet: "mymaster"}},
	} {
		if n, err := redlockrueidis.Dial(o); err == nil {
			n.Close()
			t.Errorf("Dial(%+v) = nil error, want one", o.InitAddress)
		}
	}
}

// Close of a node whose server hangs (it takes the connection, never
// answers the client's handshake) cuts the handshake: it returns at once,
// not at the client's own timeout (was: 4.7 s).
func TestDialCloseWithAHungServer(t *testing.T) {
	t.Parallel() // TestDialClose, which counts goroutines, runs alone before the parallel tests
	srv := redistest.Start(t, 1)[0]
	srv.Pause()
	defer srv.Resume()
	n, err := redlockrueidis.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the handshake is under way
	start := time.Now()
	n.Close()
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("Close of a node whose server hangs took %v", took)
	}
}
