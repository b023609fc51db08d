package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// Tests of what the docs say (issue 34, "small untruths"): each one failed
// before the docs and the code agreed.

// After Close, every call that takes something new returns ErrClosed at
// once and sends nothing; the Extend and Release of a lock taken before
// Close are still sent, and the Release releases it. (Acquire, Using,
// Leader, Inspect and ForceRelease went on after Close; Campaign alone
// said ErrClosed.)
func TestClosedTakesNothingNew(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	var sent atomic.Int32
	clients := make([]redis.UniversalClient, len(f.Nodes))
	for i, nd := range f.Nodes {
		c := nd.Client()
		c.AddHook(countingHook(&sent))
		clients[i] = c
		t.Cleanup(func() { _ = c.Close() })
	}
	rl, err := redlock.New(clients)
	require.NoError(t, err)
	ctx := context.Background()
	held, err := rl.Acquire(ctx, []string{"closing"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, rl.Close())

	sent.Store(0)
	begin := time.Now()
	e := rl.Election("closed")
	calls := map[string]func() error{
		"Acquire": func() error { _, err := rl.Acquire(ctx, []string{"new"}, time.Minute); return err },
		"Acquire(WithFencing)": func() error {
			_, err := rl.Acquire(ctx, []string{"new"}, time.Minute, redlock.WithFencing(true))
			return err
		},
		"Acquire(WithPermits(2))": func() error {
			_, err := rl.Acquire(ctx, []string{"new"}, time.Minute, redlock.WithPermits(2))
			return err
		},
		"Acquire(WithShared)": func() error {
			_, err := rl.Acquire(ctx, []string{"new"}, time.Minute, redlock.WithShared(true))
			return err
		},
		"Acquire(WithFairQueue)": func() error {
			_, err := rl.Acquire(ctx, []string{"new"}, time.Minute, redlock.WithFairQueue(true))
			return err
		},
		"Using": func() error {
			return rl.Using(ctx, []string{"new"}, time.Minute, func(context.Context) error {
				return errors.New("fn ran on a closed Redlock")
			})
		},
		"Campaign": func() error { _, err := e.Campaign(ctx, "x", 5*time.Second); return err },
		"Lead": func() error {
			return e.Lead(ctx, "x", 5*time.Second, func(context.Context) error { return errors.New("fn led on a closed Redlock") })
		},
		"Leader":       func() error { _, err := e.Leader(ctx); return err },
		"Observe":      func() error { _, err := e.Observe(ctx); return err },
		"Inspect":      func() error { _, err := rl.Inspect(ctx, "closing"); return err },
		"ForceRelease": func() error { return rl.ForceRelease(ctx, "closing") },
	}
	for name, call := range calls {
		err := call()
		assert.ErrorIs(t, err, redlock.ErrClosed, "%s after Close = %v, want ErrClosed", name, err)
		assert.Equal(t, redlock.OutcomeInvalid, redlock.OutcomeOf(err), "OutcomeOf(%s after Close): refused before anything was sent", name)
		t.Logf("%s: %v", name, err)
	}
	ch, _ := e.Observe(ctx)
	_, open := <-ch
	assert.False(t, open, "Observe after Close: a channel that is open")
	assert.Less(t, time.Since(begin), 500*time.Millisecond, "the refused calls took %v", time.Since(begin))
	assert.Zero(t, sent.Load(), "commands sent by the calls refused after Close")

	// What was taken before Close is still extended and released.
	held, err = held.Extend(ctx, time.Minute)
	require.NoError(t, err, "Extend after Close")
	_, err = held.Release(ctx)
	require.NoError(t, err, "Release after Close")
	for i := range f.Nodes {
		f.gone(t, i, "closing")
	}
}

// Close returns as soon as nothing is in flight, and waits at most one
// deadline, max(1s, 2 node timeouts), for everything: a live term whose
// nodes went silent included. (It waited for the terms' releases up to
// that bound, then for the calls in flight up to the bound again.)
func TestCloseWaitsAtMostItsBound(t *testing.T) {
	t.Parallel()
	idle := newNodes(t, 3)
	warm(t, idle.rl)
	begin := time.Now()
	require.NoError(t, idle.rl.Close())
	took := time.Since(begin)
	t.Logf("Close with nothing in flight: %v", took)
	assert.Less(t, took, 250*time.Millisecond, "Close with nothing in flight (the doc said it waited at least a second)")

	const nodeTimeout = 200 * time.Millisecond // the bound: 1s
	p := newProxied(t, 3, redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetryDelay(50*time.Millisecond))
	ctx := context.Background()
	_, err := p.rl.Election("bound").Campaign(ctx, "x", 5*time.Second)
	require.NoError(t, err)
	for _, px := range p.Proxies {
		px.Set(redistest.Partition)
	}
	begin = time.Now()
	err = p.rl.Close()
	took = time.Since(begin)
	t.Logf("Close with a term on silent nodes: %v, %v", took, err)
	assert.Error(t, err, "Close with its term's release unanswered")
	assert.Less(t, took, 1500*time.Millisecond, "Close waited past its bound of 1s (it waited 2s: the bound for the terms, then again)")
	for _, px := range p.Proxies {
		px.Cut()
	}
}

// ErrNoLeader's text says how many nodes answered and how many the read
// did not wait for, and both are true: on three healthy nodes Leader
// returns once two answered with no leader (the third cannot change it),
// and says so. (It said "(2 of 3 nodes answered)", as if one had failed.)
func TestNoLeaderSaysWhatItKnows(t *testing.T) {
	t.Parallel()
	p := newProxied(t, 3)
	ctx := context.Background()
	e := p.rl.Election("nobody")
	count := regexp.MustCompile(`(\d+) of 3 nodes answered|all (3) nodes answered`)
	for range 5 {
		_, err := e.Leader(ctx)
		require.ErrorIs(t, err, redlock.ErrNoLeader)
		m := count.FindStringSubmatch(err.Error())
		require.NotNil(t, m, "Leader = %v: no count of the answers", err)
		answered, _ := strconv.Atoi(m[1] + m[2])
		pending := 0
		if w := regexp.MustCompile(`did not wait for the other (\d+)`).FindStringSubmatch(err.Error()); w != nil {
			pending, _ = strconv.Atoi(w[1])
		}
		assert.NotContains(t, err.Error(), "failed", "Leader = %v on healthy nodes", err)
		assert.GreaterOrEqual(t, answered, 2, "Leader = %v", err)
		assert.Equal(t, 3, answered+pending, "Leader = %v: the answered and the not waited for are not every node", err)
	}

	// Node 2 answers 500ms late: Leader returns before, on the others'.
	const slow = 250 * time.Millisecond
	p.Proxies[2].SetLatency(slow, slow)
	begin := time.Now()
	_, err := e.Leader(ctx)
	took := time.Since(begin)
	require.ErrorIs(t, err, redlock.ErrNoLeader)
	t.Logf("Leader with node 2 slow, %v: %v", took, err)
	assert.Less(t, took, 2*slow, "Leader waited for the slow node")
	assert.Contains(t, err.Error(), "2 of 3 nodes answered")
	assert.Contains(t, err.Error(), "did not wait for the other 1")
	p.Proxies[2].SetLatency(0, 0)
}

// New and Open take 2 clients, as they take 1 and 3. (New refused 2, and
// so did Open, though node-redlock and earlier versions took them: their
// quorum is both, which a restart without data cannot hand to a second
// holder.)
func TestTwoNodesAccepted(t *testing.T) {
	t.Parallel()
	nodes := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, len(nodes))
	for i, nd := range nodes {
		c := nd.Client()
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	for _, n := range []int{1, 2, 3} {
		rl, err := redlock.New(clients[:n])
		require.NoError(t, err, "New(%d clients)", n)
		assert.Equal(t, n, rl.Nodes(), "New(%d clients).Nodes()", n)
		require.NoError(t, rl.Close())
	}
	rl, err := redlock.Open(nodes[0].Addr() + "," + nodes[1].Addr())
	require.NoError(t, err, "Open(2 nodes)")
	assert.Equal(t, 2, rl.Nodes(), "Open(2 nodes).Nodes()")
	require.NoError(t, rl.Close())
}

// Observe says why it cannot watch: bad input matches ErrInvalidArgument, a
// closed Redlock ErrClosed, each with a closed channel; Observe, which
// drops the error, gives that closed channel. (Observe gave a closed
// channel and said nothing.)
func TestObserveSaysWhy(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var nilCtx context.Context
	var nilElection *redlock.Election
	for name, c := range map[string]struct {
		e   *redlock.Election
		ctx context.Context
	}{
		"nil Election":  {nilElection, ctx},
		"zero Election": {&redlock.Election{}, ctx},
		"empty name":    {f.rl.Election(""), ctx},
		"nil ctx":       {f.rl.Election("w"), nilCtx},
	} {
		ch, err := c.e.Observe(c.ctx)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "Observe with a %s = %v", name, err)
		t.Logf("%s: %v", name, err)
		_, open := <-ch
		assert.False(t, open, "Observe with a %s: its channel is open", name)
	}

	ch, err := f.rl.Election("w").Observe(ctx)
	require.NoError(t, err, "Observe of a good Election")
	cancel()
	for range ch { // closed once ctx ended
	}

	rl, _ := ownRedlock(t, f, viaF)
	require.NoError(t, rl.Close())
	ch, err = rl.Election("w").Observe(context.Background())
	assert.ErrorIs(t, err, redlock.ErrClosed, "Observe on a closed Redlock = %v", err)
	_, open := <-ch
	assert.False(t, open, "Observe on a closed Redlock: its channel is open")
}

// An Acquire that waits when Close is called ends with ErrClosed, soon, and
// takes nothing: after Close, nothing new is taken (a helper's probe saw a
// waiter granted the lock 2 s after Close with New's clients, and retrying
// for ever on Open's closed clients).
func TestCloseEndsAWaitingAcquire(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "New's clients", true: "Open's clients"}[open], func(t *testing.T) {
			f := newNodes(t, 3)
			var rl *redlock.Redlock
			if open {
				var err error
				rl, err = redlock.Open(strings.Join([]string{f.Nodes[0].Addr(), f.Nodes[1].Addr(), f.Nodes[2].Addr()}, ","))
				require.NoError(t, err)
			} else {
				var err error
				rl, err = redlock.New(f.Clients)
				require.NoError(t, err)
			}
			ctx := context.Background()
			held, err := f.rl.Acquire(ctx, []string{"closing"}, 10*time.Second)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() {
				lock, err := rl.Acquire(ctx, []string{"closing"}, 10*time.Second, redlock.WithRetryCount(-1))
				if err == nil {
					err = fmt.Errorf("granted %s after Close", lock.Value())
				}
				done <- err
			}()
			queued(t, rl, "closing", 1)
			closed := time.Now()
			_ = rl.Close()
			select {
			case err := <-done:
				assert.ErrorIs(t, err, redlock.ErrClosed)
				t.Logf("the waiter ended %v after Close: %v", time.Since(closed), err)
			case <-time.After(5 * time.Second):
				t.Fatal("a waiting Acquire still ran 5s after Close")
			}
			_, err = held.Release(ctx)
			require.NoError(t, err)
			time.Sleep(300 * time.Millisecond) // a waiter's retry delay: what it would have taken
			for i := range f.Nodes {
				assert.Empty(t, f.Get(t, i, "closing"), "node %d holds the resource after Close and the holder's release", i)
			}
		})
	}
}

// Close returns within its bound when a subscription is reconnecting to a
// node that accepts but never answers: go-redis's PubSub holds its lock
// through the reconnection's handshake, which a client with no read
// timeout waits for for ever (CI's run on b90c1ce hung 8 minutes in Close
// after a partition, in TestLostTermEndsBeforeItsValidity).
func TestCloseWithASubscriptionReconnectingToASilentNode(t *testing.T) {
	t.Parallel()
	p := newProxied(t, 3)
	lock, err := p.rl.Acquire(context.Background(), []string{"reconnecting"}, 10*time.Second)
	require.NoError(t, err)
	listening(t, p.rl, 3)
	// Acquire returns at a quorum: a write still on its way to node 0
	// when the proxy cuts it is sent again by go-redis on a new
	// connection, which the wait below would take for the subscription's
	// (Close then had nothing to wait for, and returned nil).
	settled(t, p, "reconnecting", lock.Value())
	time.Sleep(20 * time.Millisecond) // and the node's answer, sent as it wrote, came back
	px := p.Proxies[0]
	px.Set(redistest.Partition)
	before := px.Accepted()
	px.Cut() // the subscription's connection breaks; go-redis reconnects into the partition
	require.Eventually(t, func() bool { return px.Accepted() > before }, 10*time.Second, time.Millisecond,
		"the subscription reconnected through the partitioned proxy")
	// Two at once: each returns once the first has, with its error (the
	// second returned nil at once, while the first still waited).
	done := make(chan error, 2)
	go func() { done <- p.rl.Close() }()
	go func() { done <- p.rl.Close() }()
	for range 2 {
		select {
		case err := <-done:
			t.Logf("Close: %v", err)
			assert.ErrorContains(t, err, "a subscription is still connecting", "each Close says what it left")
		case <-time.After(10 * time.Second): // its bound is 1 s
			t.Fatal("Close still waiting 10 s after it began (its bound: 1 s)")
		}
	}
	px.Heal() // the handshake fails; the subscription's goroutine ends
}
