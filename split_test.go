package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// Three processes that want one free resource at once, each near a node of
// its own (its calls to the other two take 30 ms more), split the three
// nodes between them in their first attempt: each takes its own node, and
// finds the other two held. Each then releases what it wrote, announcing
// nothing. With a retry delay of 10 s and no release to wake them, they all
// slept that delay with the resource free. A call whose attempt split the
// nodes now retries after a short random pause (see WithRetryDelay), so one
// of them takes the lock at once, and its release wakes the others. With
// several calls a process, one that split does not wait behind its
// process's first waiter (whose wait is for a release): 2 of 6 runs of 3 x
// 3 calls stalled so (helper-27: 4 of 6 of 3-8 processes, node 2 slower).
func TestContendersThatSplitTheNodesTryAgainSoon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		processes, calls int
		slow             time.Duration // node 2's more
	}{{3, 1, 0}, {3, 3, 0}, {6, 2, 0}, {5, 3, 40 * time.Millisecond}} {
		t.Run(fmt.Sprintf("%d processes, %d calls each, node 2 %v further", tc.processes, tc.calls, tc.slow), func(t *testing.T) {
			t.Parallel()
			splitContenders(t, tc.processes, tc.calls, tc.slow)
		})
	}
}

// splitContenders runs calls Acquires in each of processes near a node
// each (process k near node k mod 3, node 2 slow further from all), and checks that each gets the lock in turn within 4 s (a retry delay is
// 10 s).
func splitContenders(t *testing.T, processes, calls int, slow time.Duration) {
	f := newNodes(t, 3)
	var splits atomic.Int32
	obs := redlock.WithObserver(&redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if a.Op == redlock.OpAcquire && !a.Won && len(a.Stats.VotesFor) > 0 {
			splits.Add(1)
		}
	}})
	rls := make([]*redlock.Redlock, processes)
	for k := range rls {
		rl, mine := ownRedlock(t, f, ownProxies, redlock.WithNodeTimeout(time.Second))
		warm(t, rl)
		for j, px := range mine.proxies {
			var d time.Duration
			if j != k%3 {
				d = 30 * time.Millisecond
			}
			if j == 2 {
				d += slow
			}
			px.SetLatency(d, 0)
		}
		rls[k] = rl
	}
	const key = "{redlock}split"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	took := make([]time.Duration, processes*calls)
	errs := make([]error, processes*calls)
	for k := range processes * calls {
		rl := rls[k%processes]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			began := time.Now()
			l, err := rl.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1),
				redlock.WithRetryDelay(10*time.Second), redlock.WithRetryJitter(0), obs)
			took[k], errs[k] = time.Since(began), err
			if err == nil {
				_, err = l.Release(context.Background())
				errs[k] = err
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("attempts that split the nodes: %d; each call took %v", splits.Load(), took)
	for k, err := range errs {
		// Each holds the lock in turn, far within one retry delay (each
		// release wakes the others).
		require.NoError(t, err, "call %d: with the resource free, no call may sleep its 10 s retry delay (took %v)", k, took[k])
	}
}

// The short pause is for a split that no one may hold: where one value
// holds the resource on a quorum (a lock that a node it never reached does
// not know of), the call waits its retry delays for that lock's release;
// where two values, neither on a quorum, hold it with a free node left (no
// lock can be taken there until one goes), its retries come at once and
// the call fails long before its retry delays would have passed. Each
// counts against WithRetryCount.
func TestShortPauseOnlyWhereNoOneMayHoldAQuorum(t *testing.T) {
	t.Parallel()
	// Nodes 1 and 2 answer 100 ms late: node 0's call is sent before the
	// attempt fails. (A call its lane had not sent by then votes nothing,
	// and counts as anyone's: on 3 nodes, as the third vote of a rival's
	// quorum, and the attempt waits its retry delay. It did, for an hour,
	// under a -race suite beside two CPU spinners.)
	f := newProxied(t, 3, redlock.WithNodeTimeout(time.Second))
	f.Proxies[1].SetLatency(100*time.Millisecond, 0)
	f.Proxies[2].SetLatency(100*time.Millisecond, 0)
	f.Set(t, 1, "{redlock}rival", "aaaaaaaaaaaaaaaa-holder", 0)
	f.Set(t, 2, "{redlock}rival", "aaaaaaaaaaaaaaaa-holder", 0)
	const delay = 300 * time.Millisecond
	began := time.Now()
	_, err := f.rl.Acquire(context.Background(), []string{"{redlock}rival"}, time.Minute,
		redlock.WithRetryCount(2), redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	require.GreaterOrEqual(t, time.Since(began), 2*delay, "a lock on a quorum: two whole retry delays")

	f.Set(t, 1, "{redlock}split", "aaaaaaaaaaaaaaaa-one", 0)
	f.Set(t, 2, "{redlock}split", "bbbbbbbbbbbbbbbb-two", 0)
	began = time.Now()
	_, err = f.rl.Acquire(context.Background(), []string{"{redlock}split"}, time.Minute,
		redlock.WithRetryCount(4), redlock.WithRetryDelay(time.Hour), redlock.WithRetryJitter(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Len(t, ee.Attempts, 5, "each short pause counts as a retry")
	require.Less(t, time.Since(began), time.Minute, "no one may hold a quorum: no retry delay of an hour")
	f.gone(t, 0, "{redlock}split")
}

// A failed attempt's call that its node's lane had not sent yet is dropped,
// and votes nothing: the wait for the attempt's last answers (to tell a
// split) must not wait for it. Here node 4 is 40 ms away and its lane busy
// with another key's locks, nodes 1 to 4 held by four other values: each
// attempt split, and waited a node timeout (1 s) for a vote that never came
// (3.06 s for 3 retries of 20 ms, against 62 ms before the split pause).
func TestSplitPauseDoesNotWaitForACallNeverSent(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 5, redlock.WithNodeTimeout(time.Second))
	const key = "{redlock}unsent"
	for i := 1; i < 5; i++ {
		f.Set(t, i, key, fmt.Sprintf("%016d-other", i), 0)
	}
	f.Proxies[4].SetLatency(40*time.Millisecond, 0)
	ctx, stop := context.WithCancel(context.Background())
	var busy sync.WaitGroup
	busy.Add(1)
	go func() { // keeps node 4's lane sending
		defer busy.Done()
		for ctx.Err() == nil {
			if l, err := f.rl.Acquire(ctx, []string{"{redlock}busy"}, time.Minute); err == nil {
				_, _ = l.Release(context.Background())
			}
		}
	}()
	defer func() { stop(); busy.Wait() }()
	for range 3 {
		began := time.Now()
		_, err := f.rl.Acquire(context.Background(), []string{key}, time.Minute,
			redlock.WithRetryCount(3), redlock.WithRetryDelay(20*time.Millisecond), redlock.WithRetryJitter(0))
		require.ErrorIs(t, err, redlock.ErrResourceLocked)
		require.Less(t, time.Since(began), time.Second, "4 attempts 40 ms away and 3 pauses of at most 20 ms: no node timeout waited")
	}
}

// Of several resources, a node names the holder of the first it finds
// held, and another lock may hold the others on a quorum: no short pause.
// Here lock X holds B on nodes 1 and 2, a stale value A on node 1: an
// Acquire of [A, B] took its 4 attempts within 8 ms and gave up; it waits
// for X's release, and gets the lock.
func TestNoSplitPauseForSeveralResources(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	other, _ := ownRedlock(t, f, direct)
	const a, b = "{redlock}many-a", "{redlock}many-b"
	x, err := other.Acquire(context.Background(), []string{b}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, f.Peek[0].Del(context.Background(), b).Err())
	f.Set(t, 1, a, "0123456789abcdef-stale", 0)
	go func() {
		time.Sleep(500 * time.Millisecond)
		_, _ = x.Release(context.Background())
	}()
	l, err := f.rl.Acquire(context.Background(), []string{a, b}, time.Minute,
		redlock.WithRetryCount(3), redlock.WithRetryDelay(time.Second), redlock.WithRetryJitter(0))
	require.NoError(t, err, "X's release wakes it")
	_, err = l.Release(context.Background())
	require.NoError(t, err)
}
