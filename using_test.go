package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// Short ttls, so that a test sees several extensions: extend 150ms before
// each expiration of a 300ms lock.
var usingOpts = []redlock.Option{
	redlock.WithAutomaticExtensionThreshold(150 * time.Millisecond),
	redlock.WithRetryDelay(10 * time.Millisecond),
	redlock.WithRetryJitter(5 * time.Millisecond),
}

const usingTTL = 300 * time.Millisecond

// fn outlives several ttls: the lock is extended on the nodes that hold it
// (a quorum at least) the whole time, fn's ctx is never cancelled, and the
// keys are gone afterwards.
func TestUsingExtends(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	var value string
	var maxPTTLAfterTTL time.Duration
	err := c.rl.Using(context.Background(), []string{"{redlock}u"}, usingTTL, func(ctx context.Context) error {
		// Acquire returned at quorum: a minority's write may still be
		// landing, or (a node answering after the node timeout on a busy
		// machine) be missing for good; extensions then keep the quorum.
		var holders []int
		for deadline := time.Now().Add(100 * time.Millisecond); ; {
			holders, value = holders[:0], ""
			for i := range 3 {
				if v := c.Get(t, i, "{redlock}u"); v != "" {
					holders, value = append(holders, i), v
				}
			}
			if len(holders) == 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		require.GreaterOrEqual(t, len(holders), 2, "a quorum holds the lock")
		begin := time.Now()
		for time.Since(begin) < 4*usingTTL {
			time.Sleep(20 * time.Millisecond)
			if time.Since(begin) > usingTTL+50*time.Millisecond {
				for _, i := range holders {
					assert.Equal(t, value, c.Get(t, i, "{redlock}u"), "node %d still holds the lock", i)
					maxPTTLAfterTTL = max(maxPTTLAfterTTL, c.PTTL(t, i, "{redlock}u"))
				}
			}
			if ctx.Err() != nil {
				t.Errorf("fn's ctx ended: %v", context.Cause(ctx))
			}
		}
		return nil
	}, usingOpts...)
	require.NoError(t, err, "Using")
	assert.Greater(t, maxPTTLAfterTTL, 100*time.Millisecond, "PTTL seen past the first ttl: extensions reset it")
	for i := range 3 {
		c.gone(t, i, "{redlock}u")
	}
}

// waitCancelled waits for fn's ctx to end, up to bound.
func waitCancelled(t *testing.T, ctx context.Context, bound time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	select {
	case <-ctx.Done():
		return time.Since(begin)
	case <-time.After(bound):
		t.Errorf("fn's ctx was not cancelled within %v", bound)
		return bound
	}
}

// The lock is taken over on a majority mid-fn: fn's ctx is cancelled within
// one extension period with a cause matching ErrExtensionFailed, and Using
// reports it although fn returned nil.
func TestUsingStolen(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	var cause error
	err := c.rl.Using(context.Background(), []string{"{redlock}st"}, usingTTL, func(ctx context.Context) error {
		c.Set(t, 0, "{redlock}st", "thief", 0)
		c.Set(t, 1, "{redlock}st", "thief", 0)
		waitCancelled(t, ctx, 2*usingTTL)
		cause = context.Cause(ctx)
		return nil
	}, usingOpts...)
	assert.ErrorIs(t, cause, redlock.ErrExtensionFailed, "context.Cause")
	assert.ErrorIs(t, cause, redlock.ErrLockExpired, "context.Cause wraps why")
	assert.ErrorIs(t, err, redlock.ErrExtensionFailed, "Using")
	assert.Equal(t, "thief", c.Get(t, 0, "{redlock}st"), "the release must not touch the thief's keys")
}

// A majority of nodes killed mid-fn: the lock cannot be extended, fn's ctx
// is cancelled before the lock's validity is over, Using reports it. With
// unlimited retries too: nothing hangs.
func TestUsingMajorityKilled(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{10, -1} {
		redistest.Require(t)
		nodes := redistest.Start(t, 3)
		c := newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{MaxRetries: -1, DialTimeout: 50 * time.Millisecond}}, usingOpts...)
		done := make(chan error, 1)
		go func() {
			done <- c.rl.Using(context.Background(), []string{"{redlock}mk"}, usingTTL, func(ctx context.Context) error {
				nodes[1].Kill()
				nodes[2].Kill()
				waitCancelled(t, ctx, 2*usingTTL)
				assert.ErrorIs(t, context.Cause(ctx), redlock.ErrExtensionFailed, "retries %d: cause", retries)
				return nil
			}, redlock.WithRetryCount(retries))
		}()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, redlock.ErrExtensionFailed, "retries %d: Using", retries)
		case <-time.After(10 * time.Second):
			t.Fatalf("retries %d: Using did not return", retries)
		}
	}
}

// A minority killed mid-fn: the lock is extended on the others, fn completes.
func TestUsingMinorityKilled(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	c := newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{MaxRetries: -1, DialTimeout: 50 * time.Millisecond}}, usingOpts...)
	err := c.rl.Using(context.Background(), []string{"{redlock}mn"}, usingTTL, func(ctx context.Context) error {
		nodes[2].Kill()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(3 * usingTTL):
			return nil
		}
	})
	require.NoError(t, err, "Using with a minority killed")
	c.gone(t, 0, "{redlock}mn")
	c.gone(t, 1, "{redlock}mn")
}

// The caller's ctx ends mid-fn: fn's ctx ends with it, the lock is still
// released, and fn's error comes back.
func TestUsingCallerCancels(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := c.rl.Using(ctx, []string{"{redlock}cc"}, usingTTL, func(ctx context.Context) error {
		waitCancelled(t, ctx, 5*time.Second)
		return ctx.Err()
	}, usingOpts...)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrExtensionFailed)
	for i := range 3 {
		c.gone(t, i, "{redlock}cc")
	}
}

// fn's error is returned as it is; a release error is joined to it.
func TestUsingErrorsJoined(t *testing.T) {
	t.Parallel()
	errWork := errors.New("work failed")
	c := newNodes(t, 3)
	err := c.rl.Using(context.Background(), []string{"{redlock}e1"}, usingTTL, func(context.Context) error {
		return errWork
	}, usingOpts...)
	assert.Same(t, errWork, err, "Using returns fn's error unchanged")
	c.gone(t, 0, "{redlock}e1")

	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	c = newFixture(t, redistest.Setup{On: nodes, Client: &redis.Options{MaxRetries: -1, DialTimeout: 50 * time.Millisecond}})
	err = c.rl.Using(context.Background(), []string{"{redlock}e2"}, time.Hour, func(context.Context) error {
		nodes[1].Kill()
		nodes[2].Kill()
		return errWork
	}, usingOpts...)
	assert.ErrorIs(t, err, errWork, "fn's error")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee, "the release error is joined")
	assert.Equal(t, redlock.OpRelease, ee.Op)
}

// A panic in fn releases the lock and goes on.
func TestUsingPanic(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	func() {
		defer func() {
			assert.Equal(t, "boom", recover())
		}()
		_ = c.rl.Using(context.Background(), []string{"{redlock}p"}, usingTTL, func(context.Context) error {
			panic("boom")
		}, usingOpts...)
	}()
	for i := range 3 {
		c.gone(t, i, "{redlock}p")
	}
}

// No extension starts after fn returns (node-redlock leaks a timer that
// extends the released lock and aborts its signal afterwards). Using learns
// that fn returned when fn's call returns to it: an extension that Using's
// extender began before that is waited for, and the release follows it.
//
//   - fn returns 100ms before the first extension is due: no extension
//     attempt is made at all (a timer that fired after fn returned would
//     make one).
//   - fn returns right when the first extension is due: every extension
//     attempt began before the release did (none after it, as node-redlock's
//     timer did), and no node holds the lock after Using returned.
//
// (Counting the commands a client sends after Using returned counted a
// straggler's part of an extension begun before, and failed once in two
// suite runs; comparing an attempt's start with a clock read in fn's last
// statement failed by 7µs: the extender may begin in the moment between
// that statement and Using seeing fn return.)
func TestUsingNoExtensionAfterReturn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var extends, releases []time.Time // the start of each extension and release attempt
	var acquired time.Time            // the start of the last acquire attempt: the extension's due time counts from it
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		mu.Lock()
		defer mu.Unlock()
		switch a.Op {
		case redlock.OpAcquire:
			acquired = a.Stats.Start
		case redlock.OpExtend:
			extends = append(extends, a.Stats.Start)
		case redlock.OpRelease:
			releases = append(releases, a.Stats.Start)
		}
	}}
	c := newNodes(t, 3, redlock.WithObserver(obs))
	due := usingTTL - 150*time.Millisecond // the extension threshold is 150ms
	for round, ret := range []time.Duration{due - 100*time.Millisecond, due - 8*time.Millisecond, due - 8*time.Millisecond, due - 4*time.Millisecond, due} {
		var fnCtx context.Context
		err := c.rl.Using(context.Background(), []string{"{redlock}na"}, usingTTL, func(ctx context.Context) error {
			fnCtx = ctx
			mu.Lock()
			at := acquired.Add(ret) // (not fn's start: Acquire may return later, see hold)
			mu.Unlock()
			time.Sleep(time.Until(at))
			return nil
		}, usingOpts...)
		require.NoError(t, err)
		time.Sleep(usingTTL) // a leaked timer would fire meanwhile
		mu.Lock()
		if round == 0 {
			assert.Empty(t, extends, "fn returned 100ms before the first extension was due")
		}
		require.NotEmpty(t, releases, "round %d", round)
		for _, start := range extends {
			assert.True(t, start.Before(releases[0]), "round %d: an extension began %v after the release", round, start.Sub(releases[0]))
		}
		extends, releases = extends[:0], releases[:0]
		mu.Unlock()
		for i := range 3 {
			assert.Empty(t, c.Get(t, i, "{redlock}na"), "round %d: node %d holds the lock after Using returned", round, i)
		}
		assert.ErrorIs(t, context.Cause(fnCtx), context.Canceled, "fn's ctx ends plainly when Using returns")
		assert.NotErrorIs(t, context.Cause(fnCtx), redlock.ErrExtensionFailed)
	}
}

// Two Using calls on one resource run one after the other, never together.
func TestUsingExclusive(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	var inside, violations atomic.Int32
	done := make(chan error, 2)
	for range 2 {
		go func() {
			done <- c.rl.Using(context.Background(), []string{"{redlock}ex"}, usingTTL, func(ctx context.Context) error {
				if inside.Add(1) > 1 {
					violations.Add(1)
				}
				time.Sleep(2 * usingTTL)
				inside.Add(-1)
				return context.Cause(ctx)
			}, append(usingOpts, redlock.WithRetryCount(-1))...)
		}()
	}
	for range 2 {
		assert.NoError(t, <-done)
	}
	assert.Zero(t, violations.Load())
}

// Bad input is refused before anything is acquired; an acquire failure is
// returned unchanged and fn never runs.
func TestUsingValidationAndAcquireFailure(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	ctx := context.Background()
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	assert.ErrorIs(t, c.rl.Using(ctx, []string{"{redlock}v"}, time.Second, nil), redlock.ErrInvalidArgument, "nil fn")
	assert.ErrorIs(t, c.rl.Using(ctx, []string{"{redlock}v"}, 599*time.Millisecond, fn), redlock.ErrInvalidArgument, "ttl < 500ms + 100ms")
	assert.ErrorIs(t, c.rl.Using(ctx, []string{"{redlock}v", "{redlock}v"}, time.Second, fn), redlock.ErrInvalidArgument, "duplicate resources")
	assert.ErrorIs(t, c.rl.Using(ctx, []string{"{redlock}v"}, time.Second, fn, redlock.WithAutomaticExtensionThreshold(-1)), redlock.ErrInvalidArgument, "negative threshold")
	for i := range 3 {
		assert.Zero(t, c.DBSize(t, i))
	}
	assert.False(t, ran)
	assert.NoError(t, c.rl.Using(ctx, []string{"{redlock}v"}, 600*time.Millisecond, fn), "ttl = 500ms + 100ms")
	assert.True(t, ran)
	ran = false

	held, err := c.rl.Acquire(ctx, []string{"{redlock}v"}, time.Hour)
	require.NoError(t, err)
	err = c.rl.Using(ctx, []string{"{redlock}v"}, time.Second, fn, redlock.WithRetryCount(0))
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	var ee *redlock.ExecutionError
	assert.ErrorAs(t, err, &ee)
	assert.False(t, ran, "fn ran without the lock")
	_, err = held.Release(ctx)
	require.NoError(t, err)
}

// When extensions keep failing on node errors (a majority partitioned),
// fn's context ends at the lock's validity, not a retry delay after it
// (when another may hold the lock). (Was: up to a retry delay late: with
// one try per retry window, the extender slept a whole delay past the
// validity; a helper's election harness counted the overlaps.)
func TestUsingEndsFnAtTheValidityWhenExtensionsFail(t *testing.T) {
	t.Parallel()
	const delay = 800 * time.Millisecond
	var validUntil atomic.Int64
	obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if a.Won && a.Op == redlock.OpAcquire {
			validUntil.Store(a.Stats.Start.Add(a.Validity).UnixNano())
		}
	}}
	f := newProxied(t, 3, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithObserver(obs))
	var ended time.Time
	err := f.rl.Using(context.Background(), []string{"cut"}, time.Second, func(ctx context.Context) error {
		f.Proxies[1].Set(redistest.Partition)
		f.Proxies[2].Set(redistest.Partition)
		<-ctx.Done()
		ended = time.Now()
		return context.Cause(ctx)
	}, redlock.WithRetryCount(0), redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0))
	assert.ErrorIs(t, err, redlock.ErrExtensionFailed)
	until := time.Unix(0, validUntil.Load())
	late := ended.Sub(until)
	t.Logf("fn's context ended %v after the lock's validity (retry delay %v)", late.Round(time.Millisecond), delay)
	assert.Less(t, late, delay/2, "fn's context ended a retry delay after the validity")
}

// A held lock costs no goroutine of its own between its extensions (only
// fn's caller's): timers start each extension, which runs in the timer's
// goroutine while it is on its way. (Each Using had a goroutine waiting for
// its next extension: 20,000 holders, 20,000 goroutines.) The ttl puts the
// first extension 29.5 s after the acquire, well past the look
// (TestHoldersAreExtendedByTimers shows the extensions). Not
// parallel: it looks at every goroutine of the process, and another test's
// extension on its way would count.
func TestHolderWaitsWithoutAGoroutine(t *testing.T) {
	f := newNodes(t, 3)
	const n, ttl = 200, 30 * time.Second
	warm(t, f.rl) // its subscriptions and connections, before the count
	before := runtime.NumGoroutine()
	var started sync.WaitGroup
	started.Add(n)
	stop := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- f.rl.Using(context.Background(), []string{fmt.Sprintf("{redlock}cheap%d", i)}, ttl, func(ctx context.Context) error {
				started.Done()
				<-stop
				return context.Cause(ctx)
			})
		}()
	}
	started.Wait()
	buf := make([]byte, 1<<24)
	stacks := string(buf[:runtime.Stack(buf, true)])
	assert.Zero(t, strings.Count(stacks, "redlock.(*extender)"), "goroutines of the extenders while no extension is due")
	// The callers' n, and a few of the pools' (connections dialled for
	// the acquires at once): not one more per lock.
	more := runtime.NumGoroutine() - before
	t.Logf("%d goroutines more while %d locks are held", more, n)
	assert.LessOrEqual(t, more, n+n/4, "goroutines while %d locks are held", n)
	close(stop)
	for range n {
		require.NoError(t, <-errs)
	}
}

// Holders whose locks are extended several times by the extenders' timers
// keep them (TestMain finds any goroutine left).
func TestHoldersAreExtendedByTimers(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		go func() {
			// Extended 1 s before each expiration: 4.5 s is 3 or 4
			// extensions, each with 900ms to get through.
			errs <- f.rl.Using(context.Background(), []string{fmt.Sprintf("{redlock}kept%d", i)}, 2*time.Second, func(ctx context.Context) error {
				select {
				case <-time.After(4500 * time.Millisecond):
				case <-ctx.Done():
				}
				return context.Cause(ctx)
			}, redlock.WithAutomaticExtensionThreshold(time.Second), redlock.WithNodeTimeout(300*time.Millisecond))
		}()
	}
	for range n {
		require.NoError(t, <-errs, "fn's context ended: the lock was not extended")
	}
}

// An extension on its way when fn returns, which finds the lock gone,
// still makes Using say that the lock was lost (ErrExtensionFailed, and
// the observer's Lost), though fn's context no longer matters: fn may have
// run without it. (helper-21 found Using saying only the release's
// ErrLockExpired.)
func TestUsingReportsALossFoundAfterFnReturned(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3)
	const key = "{redlock}lateloss"
	var lost atomic.Int64
	obs := &redlock.Observer{Lost: func(redlock.LostInfo) { lost.Add(1) }}
	err := f.rl.Using(context.Background(), []string{key}, 5*time.Second, func(ctx context.Context) error {
		// Replies take 300ms from now on; the lock is deleted on all
		// nodes but one that holds it (the acquire returned at a quorum:
		// a third node's write may have been dropped); fn returns once that
		// node has run the extension (due 1 s in: its key's ttl goes up
		// again), whose answers from the others, "gone", are on their way.
		// The cancel point is 3.9 s after the extension began.
		for _, p := range f.Proxies {
			p.SetLatency(0, 300*time.Millisecond)
		}
		kept := -1
		for i, c := range f.Peek {
			if kept < 0 && c.PTTL(ctx, key).Val() > 0 {
				kept = i
				continue
			}
			require.NoError(t, c.Del(ctx, key).Err())
		}
		require.GreaterOrEqual(t, kept, 0, "a node holds the lock")
		low := f.Peek[kept].PTTL(ctx, key).Val()
		require.Eventually(t, func() bool {
			ttl := f.Peek[kept].PTTL(ctx, key).Val()
			low = min(low, ttl)
			return ttl > low+500*time.Millisecond
		}, 10*time.Second, time.Millisecond, "the extension ran on node %d", kept)
		return nil
	}, redlock.WithAutomaticExtensionThreshold(4*time.Second), redlock.WithNodeTimeout(3*time.Second), redlock.WithObserver(obs))
	require.ErrorIs(t, err, redlock.ErrExtensionFailed)
	require.ErrorIs(t, err, redlock.ErrLockExpired, "the extension's answer: gone")
	assert.Equal(t, int64(1), lost.Load(), "the observer's Lost")
}
