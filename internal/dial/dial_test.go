package dial

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// A node that refuses is dialed once per every; each change is told once;
// the refused connection fails with the dial's error; a caller that gave
// up says nothing of the node.
func TestQuiet(t *testing.T) {
	t.Parallel()
	refusal := errors.New("connect: connection refused")
	var dials atomic.Int32
	var refusing atomic.Bool
	refusing.Store(true)
	real := func(ctx context.Context, _, _ string) (net.Conn, error) {
		dials.Add(1)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if refusing.Load() {
			return nil, refusal
		}
		c, _ := net.Pipe()
		return c, nil
	}
	var told []string
	q := New(real, func(up bool, err error) {
		if up {
			told = append(told, "up")
		} else {
			told = append(told, "down: "+err.Error())
		}
	})
	q.every = 50 * time.Millisecond
	ctx := context.Background()

	for range 10 {
		c, err := q.Dial(ctx, "tcp", "x")
		if err != nil {
			t.Fatalf("Dial returned %v: go-redis would log it", err)
		}
		if _, err := c.Write([]byte("PING")); !errors.Is(err, refusal) {
			t.Fatalf("the refused connection's write: %v, want the dial's error", err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials within every of a refusal, want 1", n)
	}
	time.Sleep(60 * time.Millisecond)
	_, _ = q.Dial(ctx, "tcp", "x")
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials once every passed, want 2", n)
	}
	refusing.Store(false)
	time.Sleep(60 * time.Millisecond)
	c, _ := q.Dial(ctx, "tcp", "x")
	if _, ok := c.(refused); ok || q.Down() {
		t.Fatal("a node that accepts again still refused")
	}
	_ = c.Close()

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if c, _ := q.Dial(cancelled, "tcp", "x"); c == nil {
		t.Fatal("no connection for a cancelled caller")
	}
	if q.Down() {
		t.Fatal("a cancelled caller's dial marked the node down")
	}
	if want := []string{"down: connect: connection refused", "up"}; len(told) != 2 || told[0] != want[0] || told[1] != want[1] {
		t.Fatalf("told %q, want %q", told, want)
	}
}

// A dial that began before a later one answers says nothing of the node
// once the later one's answer is known: a refusal that was on its way while
// the node came back does not mark it down again (CI on c629c19: Open's
// observer heard "down" after "up" as a node restarted, and calls were
// refused for a second while the node answered).
func TestQuietIgnoresAStaleDial(t *testing.T) {
	t.Parallel()
	refusal := errors.New("connect: connection refused")
	release := make(chan struct{})
	var n atomic.Int32
	real := func(ctx context.Context, _, _ string) (net.Conn, error) {
		if n.Add(1) == 1 { // the first: refused, its answer held up
			<-release
			return nil, refusal
		}
		c, _ := net.Pipe()
		return c, nil
	}
	var told []bool
	q := New(real, func(up bool, _ error) { told = append(told, up) })
	ctx := context.Background()
	stale := make(chan struct{})
	go func() {
		defer close(stale)
		_, _ = q.Dial(ctx, "tcp", "x")
	}()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	c, err := q.Dial(ctx, "tcp", "x") // began later, answered first: the node is up
	if err != nil {
		t.Fatal(err)
	}
	if _, isRefused := c.(refused); isRefused {
		t.Fatal("the later dial's connection is a refused one")
	}
	close(release)
	<-stale
	if q.Down() {
		t.Fatal("the node is down after a stale refusal")
	}
	if len(told) != 0 {
		t.Fatalf("told %v, want nothing (the node never changed as far as the latest dial knows)", told)
	}
	c, err = q.Dial(ctx, "tcp", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, isRefused := c.(refused); isRefused {
		t.Fatal("a dial after the stale refusal was refused without dialing")
	}
}
