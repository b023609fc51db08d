package redlock_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// waitFor starts an Acquire of key on rl in the background and returns
// where its lock (or error) arrives, and when.
func waitFor(rl *redlock.Redlock, key string, opts ...redlock.Option) (<-chan *redlock.Lock, <-chan error, *time.Time) {
	got := make(chan *redlock.Lock, 1)
	fail := make(chan error, 1)
	at := new(time.Time)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := rl.Acquire(ctx, []string{key}, time.Minute, append([]redlock.Option{redlock.WithRetryCount(-1)}, opts...)...)
		*at = time.Now()
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
	return got, fail, at
}

// awaitLock returns the lock a waitFor delivers within d, failing the test
// (saying what was expected) on an error or a timeout.
func awaitLock(t *testing.T, got <-chan *redlock.Lock, fail <-chan error, d time.Duration, what string) *redlock.Lock {
	t.Helper()
	select {
	case l := <-got:
		return l
	case err := <-fail:
		t.Fatalf("waiting Acquire = %v", err)
	case <-time.After(d):
		t.Fatal(what)
	}
	return nil
}

// A waiter in another Redlock (as another process would be) gets the lock
// as soon as it is released, not after its retry delay of 10 s.
func TestWakeOnRelease(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes}) // its own clients and Redlock
	ctx := context.Background()
	held, err := holder.rl.Acquire(ctx, []string{"{redlock}wk"}, time.Minute)
	require.NoError(t, err)
	var woken atomic.Bool
	obs := &redlock.Observer{Wait: func(w redlock.WaitInfo) { woken.Store(w.Woken) }}
	got, fail, at := waitFor(waiter.rl, "{redlock}wk", redlock.WithRetryDelay(10*time.Second), redlock.WithRetryJitter(0), redlock.WithObserver(obs))
	queued(t, waiter.rl, "{redlock}wk", 1, waiter.Peek...) // it failed once, queued and subscribed
	released := time.Now()
	_, err = held.Release(ctx)
	require.NoError(t, err)
	l := awaitLock(t, got, fail, 20*time.Second, "the waiter did not get the lock")
	t.Logf("acquired %v after the release", at.Sub(released))
	assert.True(t, woken.Load(), "woken by the release, not by the 10s retry delay")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// With pub/sub denied (an ACL user without channels), releases still work
// and a waiter still gets the lock, after its retry delay.
func TestWakeWithoutPubSub(t *testing.T) {
	t.Parallel()
	nodes := redistest.Start(t, 3)
	for _, nd := range nodes {
		require.NoError(t, nd.Client().Do(context.Background(), "ACL", "SETUSER", "nochan", "on", ">pw", "~*", "resetchannels", "+@all").Err())
	}
	opts := &redis.Options{Username: "nochan", Password: "pw"}
	// The ACL really denies pub/sub to that user.
	ps := nodes[0].Client(opts).Subscribe(context.Background(), redlock.ReleasedChannel)
	_, err := ps.Receive(context.Background())
	require.Error(t, err, "SUBSCRIBE as a user without channels")
	_ = ps.Close()
	holder := newFixture(t, redistest.Setup{On: nodes, Client: opts})
	waiter := newFixture(t, redistest.Setup{On: nodes, Client: opts})
	ctx := context.Background()
	held, err := holder.rl.Acquire(ctx, []string{"{redlock}np"}, time.Minute)
	require.NoError(t, err)
	got, fail, _ := waitFor(waiter.rl, "{redlock}np", redlock.WithRetryDelay(200*time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	_, err = held.Release(ctx)
	require.NoError(t, err, "Release on nodes that deny PUBLISH")
	l := awaitLock(t, got, fail, 10*time.Second, "the waiter never got the lock without pub/sub")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// Close during a wait: the waiter ends at once with ErrClosed, taking
// nothing, though the resource is then released (issue 34: before, it went
// on, on its retry delay alone, and took the lock after Close); Close is
// idempotent and leaves no goroutine (goleak).
func TestCloseDuringWait(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	held, err := holder.rl.Acquire(ctx, []string{"{redlock}cl"}, time.Minute)
	require.NoError(t, err)
	got, fail, _ := waitFor(waiter.rl, "{redlock}cl", redlock.WithRetryDelay(100*time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, waiter.rl.Close())
	require.NoError(t, waiter.rl.Close(), "second Close")
	select {
	case err := <-fail:
		assert.ErrorIs(t, err, redlock.ErrClosed)
	case l := <-got:
		t.Fatalf("the waiter took the lock after Close: %s", l.Value())
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter still waited 5s after Close")
	}
	_, err = held.Release(ctx)
	require.NoError(t, err, "Release through another Redlock")
	time.Sleep(200 * time.Millisecond) // two of the waiter's retry delays
	for i := range holder.Nodes {
		assert.Empty(t, holder.Get(t, i, "{redlock}cl"), "node %d", i)
	}
}

// A storm of announcements wakes a waiter at most once per announcement,
// and a burst coalesces: 1,000 announcements sent at once for a resource
// that stays held cause far fewer attempts than that.
func TestWakeStormCoalesces(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	var attempts atomic.Int32
	for _, cl := range waiter.Clients {
		cl.AddHook(hook{onCmd: func(cmd redis.Cmder) {
			if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
				attempts.Add(1)
			}
		}})
	}
	ctx := context.Background()
	held, err := holder.rl.Acquire(ctx, []string{"{redlock}st"}, time.Minute)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := waiter.rl.Acquire(wctx, []string{"{redlock}st"}, time.Minute,
			redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Minute))
		done <- err
	}()
	queued(t, waiter.rl, "{redlock}st", 1, waiter.Peek...) // one failed attempt, queued and subscribed
	before := attempts.Load()
	const storm = 1000
	foreign := strings.Repeat("f", 32)
	pipe := holder.Peek[0].Pipeline()
	for range storm {
		pipe.Publish(ctx, redlock.ReleasedChannel, foreign+"{redlock}st")
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return attempts.Load() > before }, 10*time.Second, time.Millisecond,
		"the announcements woke the waiter")
	time.Sleep(500 * time.Millisecond) // the rest of the storm
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	// Each attempt is one script call per node.
	woken := int(attempts.Load()-before) / 3
	t.Logf("%d announcements caused %d attempts", storm, woken)
	assert.Positive(t, woken, "the announcements woke the waiter")
	assert.Less(t, woken, storm/10, "a burst of announcements coalesces")
	_, err = held.Release(ctx)
	require.NoError(t, err)
}

// Waiters of one Redlock for the same resource queue: a release wakes only
// the longest waiter, so they get the lock in the order they began to wait,
// and a release costs at most one attempt per node's announcement of it, not
// one per waiter (woken all at once, they split the nodes, and the order is
// left to chance).
//
// The bound is what the design promises, whatever the timing: a waiter
// attempts only when woken (its retry delay is a minute), a wake comes only
// from an announcement, and an announcement wakes only the head of the
// queue. Each node announces each release once, so n releases that find
// waiters (the holder's and those of the first n−1 waiters) cost at most
// 3n attempts on three nodes; waking every waiter would cost at least
// n+(n−1)+…+1. (An attempt woken by the first node's announcement may find
// the next node not yet released, and try again at the next: that is
// allowed, and it is why the bound is 3n and not n.)
func TestWaitersQueueInOrder(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key = "{redlock}fifo"
	held, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	const n = 8
	var tries [n]atomic.Int32
	order := make(chan int, n)
	errs := make(chan error, n)
	for i := range n {
		obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
			if a.Op == redlock.OpAcquire { // the observer sees the lock's release too
				tries[i].Add(1)
			}
		}}
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := waiter.rl.Acquire(ctx, []string{key}, time.Minute,
				redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Minute), redlock.WithObserver(obs))
			if err != nil {
				errs <- err
				return
			}
			order <- i
			time.Sleep(10 * time.Millisecond)
			_, err = l.Release(ctx)
			errs <- err
		}()
		// The next waiter starts once this one queues: the first after one
		// failed attempt, the others before any.
		require.Eventually(t, func() bool { return redlock.QueuedWaiters(waiter.rl, []string{key}) == i+1 },
			10*time.Second, time.Millisecond, "waiter %d did not queue", i)
	}
	before := int(tries[0].Load()) // the first waiter's failed attempt; the others made none
	_, err = held.Release(ctx)
	require.NoError(t, err)
	var got []int
	for range n {
		select {
		case i := <-order:
			got = append(got, i)
		case <-time.After(20 * time.Second):
			t.Fatalf("waiters stuck after %v (their retry delay is a minute)", got)
		}
	}
	for range n {
		require.NoError(t, <-errs)
	}
	total, per := -before, make([]int32, n)
	for i := range n {
		per[i] = tries[i].Load()
		total += int(per[i])
	}
	t.Logf("order %v; %d attempts for %d hand-offs (per waiter %v)", got, total, n, per)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, got, "first come, first served")
	assert.LessOrEqual(t, total, 3*n, "each announcement wakes one waiter, not all")
}

// A newcomer does not jump the queue: while the Redlock has waiters for a
// resource, a new waiting Acquire of it queues behind them before its first
// attempt, even when the resource happens to be free (here: the holder's
// lock is gone as if expired, which nobody announces, and the head waits for
// its delay).
func TestNewcomerJoinsTheQueue(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key = "{redlock}barge"
	_, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	order := make(chan string, 2)
	var wg sync.WaitGroup
	defer wg.Wait()
	acquire := func(name string, delay time.Duration) {
		l, err := waiter.rl.Acquire(ctx, []string{key}, time.Minute,
			redlock.WithRetryCount(-1), redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0))
		if err != nil {
			order <- name + ": " + err.Error()
			return
		}
		order <- name
		time.Sleep(20 * time.Millisecond)
		_, _ = l.Release(ctx)
	}
	wg.Add(2)
	go func() { defer wg.Done(); acquire("head", 1500*time.Millisecond) }() // fails once, then waits 1.5s
	queued(t, waiter.rl, key, 1, waiter.Peek...)
	for _, p := range holder.Peek { // the holder's lock is gone as if expired: nobody announces it
		require.NoError(t, p.Del(ctx, key).Err())
	}
	go func() { defer wg.Done(); acquire("newcomer", 10*time.Second) }()
	var got []string
	for range 2 {
		select {
		case name := <-order:
			got = append(got, name)
		case <-time.After(15 * time.Second):
			t.Fatalf("stuck after %v", got)
		}
	}
	assert.Equal(t, []string{"head", "newcomer"}, got, "first come, first served")
}

// A waiter whose first attempt met silent nodes (their breakers open) is
// still woken by the release once the nodes answer again: its subscriptions
// there probe the nodes rather than wait for a call, which its retry delay
// of an hour would not make before then. (They waited for one: a Cluster
// waiter on a loaded machine never subscribed, compat's SSUBSCRIBE check.)
func TestWaiterHearsNodesWhoseBreakersOpened(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: redistest.NoClientTimeouts})
	holder, _ := ownRedlock(t, f, direct)
	ctx := context.Background()
	held, err := holder.Acquire(ctx, []string{"{redlock}bo"}, time.Minute)
	require.NoError(t, err)
	for _, p := range f.Proxies {
		p.Set(redistest.DropReplies)
	}
	tried := make(chan struct{}, 1)
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		t.Logf("attempt %d: for %v against %v", a.Number, a.Stats.VotesFor, a.Stats.VotesAgainst)
		select {
		case tried <- struct{}{}:
		default:
		}
	}, Wait: func(w redlock.WaitInfo) { t.Logf("waited %v woken %v", w.Waited, w.Woken) }}
	got, fail, _ := waitFor(f.rl, "{redlock}bo", redlock.WithRetryDelay(time.Hour), redlock.WithRetryJitter(0), redlock.WithObserver(obs))
	select {
	case <-tried: // no answer within the node timeout: the breakers are open
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's first attempt did not end")
	}
	for _, p := range f.Proxies {
		p.Heal()
	}
	queued(t, f.rl, "{redlock}bo", 1, f.Peek...)
	_, err = held.Release(ctx)
	require.NoError(t, err)
	l := awaitLock(t, got, fail, 10*time.Second, "the waiter (retry delay 1h) was not woken by the release")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// A waiter woken by a release whose attempt could not hear from some
// nodes (their connections still being set up, or their breakers open)
// tries again once those nodes answer, not after its retry delay: a
// waiter with an hour's delay, woken while two of three nodes were slow to
// set up a connection (a loaded machine after a cut), slept on with the
// lock free (TestWaiterHearsNodesWhoseBreakersOpened failed so in CI).
func TestWaiterTriesAgainWhenMissedNodesAnswer(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3)
	holder, _ := ownRedlock(t, f, direct)
	ctx := context.Background()
	const key = "{redlock}missed"
	held, err := holder.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	var attempts atomic.Int64
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		attempts.Add(1)
		t.Logf("attempt %d: for %v against %v", a.Number, a.Stats.VotesFor, a.Stats.VotesAgainst)
	}}
	got, fail, _ := waitFor(f.rl, key, redlock.WithRetryDelay(time.Hour), redlock.WithRetryJitter(0), redlock.WithObserver(obs))
	queued(t, f.rl, key, 1, f.Peek...)
	// Nodes 1 and 2: every new connection takes 3s to set up (far over
	// the set-up's wait), and the open ones are cut.
	for _, p := range f.Proxies[1:] {
		p.SetDialLatency(3 * time.Second)
		p.Cut()
	}
	before := attempts.Load()
	queued(t, f.rl, key, 1, f.Peek...) // the subscriptions are back, and their return woke the waiter
	require.Eventually(t, func() bool { return attempts.Load() > before }, 10*time.Second, time.Millisecond)
	released := time.Now()
	_, err = held.Release(ctx)
	require.NoError(t, err)
	l := awaitLock(t, got, fail, 15*time.Second, "the waiter (retry delay 1h) was woken by the release while two nodes were setting up connections, and did not try again once they answered")
	t.Logf("the waiter took the lock %v after the release", time.Since(released))
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// A wake whose attempts open breakers keep from a dead majority carries
// over a few times, not for the whole retry delay: a waiter with an hour's
// delay, woken once while every call to 3 of 5 nodes is refused (each
// breaker's parked workers at their bound), made 10 attempts a second.
func TestWokenWaiterOnADeadMajorityStaysQuiet(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 5)
	holder, _ := ownRedlock(t, f, direct)
	ctx := context.Background()
	held, err := holder.Acquire(ctx, []string{"{redlock}dead"}, time.Minute)
	require.NoError(t, err)
	for _, p := range f.Proxies[:3] {
		p.Set(redistest.Partition)
	}
	var attempts atomic.Int64
	obs := &redlock.Observer{Attempt: func(redlock.AttemptInfo) { attempts.Add(1) }}
	_, _, _ = waitFor(f.rl, "{redlock}dead", redlock.WithRetryDelay(time.Hour), redlock.WithRetryJitter(0), redlock.WithObserver(obs))
	require.Eventually(t, func() bool { return redlock.QueuedWaiters(f.rl, []string{"{redlock}dead"}) == 1 }, 10*time.Second, time.Millisecond)
	for range 6 { // workers parked on each silent node, up to the bound: its breaker refuses every call
		_, _ = f.rl.Acquire(ctx, []string{"other"}, time.Second, redlock.WithRetryCount(0))
		time.Sleep(150 * time.Millisecond)
	}
	before := attempts.Load()
	_, err = held.Release(ctx)
	require.NoError(t, err)
	time.Sleep(3 * time.Second)
	n := attempts.Load() - before
	t.Logf("attempts in the 3 s after one release: %d", n)
	assert.LessOrEqual(t, n, int64(2*(1+redlock.MaxCarries)), "a waiter with an hour's delay, woken once")
	for _, p := range f.Proxies {
		p.Heal()
	}
}

// Waiters behind the head of their queue in a Redlock make no attempts of
// their own: the head's attempts (woken by the release, or after its
// retry delay) are the queue's, so a busy lock costs the nodes the same
// with 40 waiters as with one. (Each waiter tried every retry delay: 40
// waiters at 50ms made about 800 attempts a second on a held lock.)
func TestWaitersBehindTheHeadStayQuiet(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key, n, delay = "{redlock}quiet", 40, 50 * time.Millisecond
	held, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	var attempts atomic.Int64
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if a.Op == redlock.OpAcquire {
			attempts.Add(1)
		}
	}}
	done := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := waiter.rl.Acquire(ctx, []string{key}, time.Minute, redlock.WithRetryCount(-1),
				redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0), redlock.WithObserver(obs))
			if err == nil {
				time.Sleep(time.Millisecond)
				_, err = l.Release(ctx)
			}
			done <- err
		}()
	}
	queued(t, waiter.rl, key, n)
	const held1 = time.Second
	before := attempts.Load()
	time.Sleep(held1)
	quiet := attempts.Load() - before
	t.Logf("attempts in %v while %d waiters queued on a held lock (retry delay %v): %d", held1, n, delay, quiet)
	assert.LessOrEqual(t, quiet, int64(held1/delay)+2, "only the head tries, once per retry delay")
	_, err = held.Release(ctx)
	require.NoError(t, err)
	for i := range n {
		select {
		case err := <-done:
			require.NoError(t, err, "waiter")
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d waiters got the lock in 20 s", i, n)
		}
	}
}

// A waiter behind the head still ends when its retries would have, with
// the error of an attempt of its own (its last: it queued behind the head
// before its first, and the head's attempts stood for it until then); and
// when the head gives up, the next in line tries at once, whatever its
// retry delay.
func TestQuietWaiterEndsAndTakesOver(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key = "{redlock}quietend"
	_, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	head := func(delay time.Duration) (stop func(), done <-chan error) {
		headCtx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		ended := make(chan error, 1)
		go func() {
			_, err := waiter.rl.Acquire(headCtx, []string{key}, time.Minute, redlock.WithRetryCount(-1),
				redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0))
			ended <- err
		}()
		return stop, ended
	}
	stopHead, headDone := head(50 * time.Millisecond)
	queued(t, waiter.rl, key, 1)

	// Out of retries behind the head: it ends, having tried once itself
	// (twice before its first attempt waited behind the head too).
	var tries atomic.Int64
	obs := redlock.WithObserver(&redlock.Observer{Attempt: func(redlock.AttemptInfo) { tries.Add(1) }})
	begin := time.Now()
	_, err = waiter.rl.Acquire(ctx, []string{key}, time.Minute, redlock.WithRetryCount(4),
		redlock.WithRetryDelay(50*time.Millisecond), redlock.WithRetryJitter(0), obs)
	took := time.Since(begin)
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.Less(t, took, 5*time.Second, "a waiter out of retries behind the head ended")
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "it waited its 4 retry delays")
	assert.Equal(t, int64(1), tries.Load(), "its last attempt only")
	stopHead()
	require.ErrorIs(t, <-headDone, context.Canceled)
	stopHead, headDone = head(time.Minute)
	queued(t, waiter.rl, key, 1)

	// The holder's lock is gone as if expired (nobody announces it); the
	// head waits a minute, the next waiter is quiet behind it: when the head
	// gives up, the next tries at once.
	got, fail, _ := waitFor(waiter.rl, key, redlock.WithRetryDelay(time.Minute))
	queued(t, waiter.rl, key, 2)
	for _, p := range holder.Peek {
		require.NoError(t, p.Del(ctx, key).Err())
	}
	stopHead()
	require.ErrorIs(t, <-headDone, context.Canceled)
	l := awaitLock(t, got, fail, 10*time.Second, "the next waiter did not take over from the head that gave up")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// A waiter stays quiet only behind a head that tries at least as often: a
// lock that vanished unannounced (expired) goes to the waiter with the
// short retry delay, not after the head's minute.
func TestQuietOnlyBehindAQuickerHead(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key = "{redlock}quietslow"
	_, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	_, _, _ = waitFor(waiter.rl, key, redlock.WithRetryDelay(time.Minute))
	queued(t, waiter.rl, key, 1)
	got, fail, _ := waitFor(waiter.rl, key, redlock.WithRetryDelay(50*time.Millisecond))
	queued(t, waiter.rl, key, 2)
	for _, p := range holder.Peek { // gone as if expired: nobody announces it
		require.NoError(t, p.Del(ctx, key).Err())
	}
	l := awaitLock(t, got, fail, 10*time.Second, "the waiter with a 50ms delay behind a head with a minute's did not take the lock")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// A waiter stays quiet only behind a head whose last attempt found the
// resources held by another: a head that cannot get even a free lock (here
// it asks a replica's acknowledgement of nodes that have none) does not
// keep the lock from the waiters behind it. (helper-18's probe: the one
// behind waited for ever.)
func TestQuietOnlyBehindAHeadThatMeetsAHolder(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key = "{redlock}quietfails"
	held, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	_, _, _ = waitFor(waiter.rl, key, redlock.WithRetryDelay(50*time.Millisecond), redlock.WithRetryJitter(0),
		redlock.WithReplicaAck(1, 10*time.Millisecond))
	queued(t, waiter.rl, key, 1)
	got, fail, _ := waitFor(waiter.rl, key, redlock.WithRetryDelay(50*time.Millisecond), redlock.WithRetryJitter(0))
	queued(t, waiter.rl, key, 2)
	_, err = held.Release(ctx)
	require.NoError(t, err)
	l := awaitLock(t, got, fail, 10*time.Second, "the waiter behind a head that cannot win did not take the free lock")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// A waiter that queues behind others makes its first attempt a retry delay
// after it queued, so that a call whose ctx ends before its retries do
// reports the contention it met (it said "not attempted"), and the retry
// delay in the queue counts as a retry, so that WithRetryCount's window
// holds (it was one delay over). A waiter behind a head that may wait
// longer between attempts (its jitter) tries on its own delay.
func TestQueuedWaiterKeepsItsWindowAndError(t *testing.T) {
	t.Parallel()
	holder := newNodes(t, 3)
	waiter := newFixture(t, redistest.Setup{On: holder.Nodes})
	ctx := context.Background()
	const key = "{redlock}quietwindow"
	_, err := holder.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	_, _, _ = waitFor(waiter.rl, key, redlock.WithRetryDelay(time.Second), redlock.WithRetryJitter(999*time.Millisecond))
	queued(t, waiter.rl, key, 1)
	tries := func() (redlock.Option, *atomic.Int64) {
		var n atomic.Int64
		return redlock.WithObserver(&redlock.Observer{Attempt: func(redlock.AttemptInfo) { n.Add(1) }}), &n
	}

	obs, n := tries()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = waiter.rl.Acquire(cctx, []string{key}, time.Minute, redlock.WithRetryCount(-1),
		redlock.WithRetryDelay(50*time.Millisecond), redlock.WithRetryJitter(0), obs)
	assert.ErrorIs(t, err, redlock.ErrResourceLocked, "a waiting call cut short by its ctx")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Positive(t, n.Load(), "attempts of a 1 s call with a 50ms delay")

	const retries, delay = 3, 500 * time.Millisecond
	begin := time.Now()
	_, err = waiter.rl.Acquire(ctx, []string{key}, time.Minute, redlock.WithRetryCount(retries),
		redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0))
	took := time.Since(begin)
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.LessOrEqual(t, took, retries*delay+(retries+1)*100*time.Millisecond, "WithRetryCount's window (the default node timeout: 100ms)")

	obs, n = tries()
	_, err = waiter.rl.Acquire(ctx, []string{key}, time.Minute, redlock.WithRetryCount(4),
		redlock.WithRetryDelay(time.Second), redlock.WithRetryJitter(0), obs)
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.GreaterOrEqual(t, n.Load(), int64(4), "attempts behind a head whose jitter lets it wait up to 2 s")
}
