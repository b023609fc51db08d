package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// fairQueue is the key of resource key's queue (a resource without a hash
// tag is its own).
func fairQueue(key string) string { return "redlock:queue:{" + key + "}:" + key }

// queuedOnNodes waits until key's queue holds n waiters on every node.
func queuedOnNodes(t *testing.T, f *fixture, key string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, p := range f.Peek {
			if p.ZCard(context.Background(), fairQueue(key)).Val() != n {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "%d waiters queued for %s on every node", n, key)
}

// releaseInTurn releases l, and each of the n locks that locks gives in
// turn (the queue's next head is handed each release), then the last.
func releaseInTurn(t *testing.T, l *redlock.Lock, locks <-chan *redlock.Lock, n int) {
	t.Helper()
	for range n {
		_, err := l.Release(context.Background())
		require.NoError(t, err)
		select {
		case l = <-locks:
		case <-time.After(10 * time.Second):
			t.Fatal("the head of the queue did not get the lock")
		}
	}
	_, err := l.Release(context.Background())
	require.NoError(t, err)
}

// Waiters in other processes (Redlocks with clients of their own) get the
// lock in the order they began waiting, each handed it by the release
// before. Their retry delay is an hour: the hand-over's announcement wakes
// them.
func TestFairQueueOrder(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "fifo"
	l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
	require.NoError(t, err)
	settled(t, f, key, l.Value()) // on every node before a waiter comes: the call returned at a quorum
	const n = 4
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	locks := make(chan *redlock.Lock, n)
	for i := range n {
		other, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
		spawn(&wg, func() {
			got, err := other.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			locks <- got
		})
		queuedOnNodes(t, f, key, int64(i+1))
	}
	releaseInTurn(t, l, locks, n)
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3}, order, "first come, first served")
	require.Eventually(t, func() bool {
		for _, p := range f.Peek {
			if p.Exists(ctx, key).Val() != 0 {
				return false
			}
		}
		return true
	}, time.Second, time.Millisecond, "with no one queued, the last release deletes the key")
}

// A waiter that vanished (its process killed) and is handed the lock holds
// it up for its ttl (as a holder that vanished does), then leaves the
// queue: its liveness ran out. The ghost here asked for 1s.
func TestFairQueueDeadHead(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "dead"
	l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
	require.NoError(t, err)
	settled(t, f, key, l.Value()) // on every node before a waiter comes: the call returned at a quorum
	// A waiter that began waiting long ago, alive (its deadline a minute
	// away) until the other waiter has queued behind it.
	ghost := "0123456789abcdef0123456789abcdef"
	live := "redlock:qlive:{" + key + "}:" + key
	for _, p := range f.Peek {
		now := time.Now().UnixMilli()
		require.NoError(t, p.ZAdd(ctx, fairQueue(key), redis.Z{Score: float64(now - 60000), Member: ghost + ":1000"}).Err())
		require.NoError(t, p.ZAdd(ctx, live, redis.Z{Score: float64(now + 60000), Member: ghost + ":1000"}).Err())
	}
	other, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	got := make(chan acquired, 1)
	go func() {
		nl, err := other.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
		got <- acquired{nl, err}
	}()
	queuedOnNodes(t, f, key, 2)
	// Its last ask, just before it vanished: it leaves in a second. (A
	// deadline set before the other waiter queued could pass, on a loaded
	// machine, before the release: 2 of 20 runs beside two CPU hogs.)
	for _, p := range f.Peek {
		require.NoError(t, p.ZAdd(ctx, live, redis.Z{Score: float64(time.Now().UnixMilli() + 1000), Member: ghost + ":1000"}).Err())
	}
	released := time.Now()
	_, err = l.Release(ctx)
	require.NoError(t, err)
	// A quorum, not every node: a release returns at its quorum, and the
	// last node's hand-over may come late (on a loaded machine, after a
	// node timeout and a second send), by when the ghost's place has
	// lapsed there and the node hands the key to the other waiter.
	assert.Eventually(t, func() bool {
		n := 0
		for _, h := range f.holders(t, key) {
			if h == ghost {
				n++
			}
		}
		return n >= 2
	}, 500*time.Millisecond, time.Millisecond, "handed to the head of the queue on a quorum")
	select {
	case g := <-got:
		require.NoError(t, g.err)
		took := time.Since(released)
		assert.Less(t, took, 2*time.Second, "the dead head held it up for its ttl (1s) and a third of a liveness at most")
		t.Logf("the next waiter got the lock %v after the release to a dead head", took)
		_, err = g.l.Release(ctx)
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a dead head blocked the queue")
	}
}

// A waiter that gives up (its ctx ends) leaves every queue at once, and a
// plain (unfair) Acquire, node-redlock's included, cannot take a resource
// handed to a waiter.
func TestFairQueueGiveUpAndInterop(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "leave"
	l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
	require.NoError(t, err)
	settled(t, f, key, l.Value()) // on every node before a waiter comes: the call returned at a quorum
	other, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := other.Acquire(cctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1))
		done <- err
	}()
	queuedOnNodes(t, f, key, 1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	queuedOnNodes(t, f, key, 0)

	// Handed to a waiter, the key is out of a plain Acquire's reach.
	waiter, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	got := make(chan acquired, 1)
	go func() {
		nl, err := waiter.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
		got <- acquired{nl, err}
	}()
	queuedOnNodes(t, f, key, 1)
	plain, _ := ownRedlock(t, f, viaF)
	_, err = l.Release(ctx)
	require.NoError(t, err)
	_, err = plain.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(0))
	if err == nil {
		t.Log("the waiter took it first") // it is woken by the same release
	}
	g := <-got
	require.NoError(t, g.err)
	if err == nil {
		t.Fatal("a plain Acquire and the waiter both got the lock")
	}
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	_, err = g.l.Release(ctx)
	require.NoError(t, err)
}

// Across Redlocks (processes), the fair queue keeps mutual exclusion, and
// every waiter is served: 4 Redlocks × 2 goroutines on one key.
func TestFairQueueContended(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 5, redlock.WithFairQueue(true))
	var inside, violations, grants atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	per := make([]atomic.Int32, 8)
	for p := range 4 {
		rl, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
		for g := range 2 {
			spawn(&wg, func() {
				for time.Now().Before(deadline) {
					l, err := rl.Acquire(context.Background(), []string{"fc"}, 10*time.Second, redlock.WithRetryCount(-1))
					if !assert.NoError(t, err) {
						return
					}
					grants.Add(1)
					per[2*p+g].Add(1)
					if inside.Add(1) > 1 {
						violations.Add(1)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					_, err = l.Release(context.Background())
					assert.NoError(t, err)
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	assert.Zero(t, violations.Load())
	var counts []int32
	for i := range per {
		counts = append(counts, per[i].Load())
		assert.Positive(t, per[i].Load(), "waiter %d was served", i)
	}
	t.Logf("%d grants, per waiter %v", grants.Load(), fmt.Sprint(counts))
}

// A Redlock keeps its fair waiters' places on the nodes together: one call
// per node and resource every third of a liveness renews them all, and only
// the waiter at the head of a node's queue makes attempts. 100 waiters
// with a 50ms retry delay cost each node a few script calls a second (each
// made its own attempt every 50ms before: about 2,000 a second), keep
// their places past their liveness (1s), and are each served in turn.
func TestFairWaitersKeepTheirPlacesTogether(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "together"
	l, err := f.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	settled(t, f, key, l.Value())
	const n = 100
	var wg sync.WaitGroup
	locks := make(chan *redlock.Lock, n)
	for range n {
		spawn(&wg, func() {
			got, err := f.rl.Acquire(ctx, []string{key}, time.Minute, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond))
			if assert.NoError(t, err) {
				locks <- got
			}
		})
	}
	queuedOnNodes(t, f, key, n)
	time.Sleep(500 * time.Millisecond) // the waiters' first attempts are done
	before := make([]int, len(f.Peek))
	for i, p := range f.Peek {
		before[i] = scriptCalls(t, p)
	}
	const window = 3 * time.Second // past a liveness (1s): only renewals keep them queued
	time.Sleep(window)
	for i, p := range f.Peek {
		calls := scriptCalls(t, p) - before[i]
		t.Logf("node %d: %d script calls in %v with %d waiters", i, calls, window, n)
		// A renewal every third of a second, and the head's attempts
		// every 50ms: about 70; a waiter's own attempts would be 6,000.
		assert.Less(t, calls, 150, "node %d: the waiters' places are renewed together", i)
		assert.EqualValues(t, n, p.ZCard(ctx, fairQueue(key)).Val(), "node %d: every waiter keeps its place", i)
	}
	releaseInTurn(t, l, locks, n)
	wg.Wait()
}

// A node that lost its queue (restarted, flushed) gets the waiters back:
// the renewal that finds them missing wakes them, and each one's attempt
// queues it again with the score it had, so the order holds. Their retry
// delay is an hour and they make no attempts of their own before.
func TestFairWaitersQueuedAgainWhereANodeLostThem(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "lostqueue"
	l, err := f.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	settled(t, f, key, l.Value())
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []int
	locks := make(chan *redlock.Lock, n)
	for i := range n {
		spawn(&wg, func() {
			got, err := f.rl.Acquire(ctx, []string{key}, time.Minute, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			if assert.NoError(t, err) {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				locks <- got
			}
		})
		queuedOnNodes(t, f, key, int64(i+1))
		// The queue orders by when each began waiting, in ms, then by
		// id: two that began in the same ms go in their ids' order.
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, f.Peek[0].Del(ctx, fairQueue(key), "redlock:qlive:{"+key+"}:"+key).Err())
	queuedOnNodes(t, f, key, n) // within a renewal and an attempt
	releaseInTurn(t, l, locks, n)
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, order, "first come, first served")
}
