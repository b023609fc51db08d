package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	attempts []redlock.AttemptInfo
	waits    []redlock.WaitInfo
	votes    []*redlock.NodeError
	calls    []redlock.CallInfo
	lost     []redlock.LostInfo
	released []redlock.ReleasedInfo
	usings   []redlock.UsingInfo
}

func (r *recorder) observer() *redlock.Observer {
	return &redlock.Observer{
		Attempt:  func(i redlock.AttemptInfo) { r.mu.Lock(); r.attempts = append(r.attempts, i); r.mu.Unlock() },
		Wait:     func(i redlock.WaitInfo) { r.mu.Lock(); r.waits = append(r.waits, i); r.mu.Unlock() },
		Vote:     func(e *redlock.NodeError) { r.mu.Lock(); r.votes = append(r.votes, e); r.mu.Unlock() },
		Done:     func(i redlock.CallInfo) { r.mu.Lock(); r.calls = append(r.calls, i); r.mu.Unlock() },
		Lost:     func(i redlock.LostInfo) { r.mu.Lock(); r.lost = append(r.lost, i); r.mu.Unlock() },
		Released: func(i redlock.ReleasedInfo) { r.mu.Lock(); r.released = append(r.released, i); r.mu.Unlock() },
		Using:    func(i redlock.UsingInfo) { r.mu.Lock(); r.usings = append(r.usings, i); r.mu.Unlock() },
	}
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts, r.waits, r.votes, r.calls, r.lost, r.released, r.usings = nil, nil, nil, nil, nil, nil, nil
}

// The observer sees what a scripted run on real nodes did: contention, a
// hung minority node, a release with its hold time, a lost lock.
func TestObserverSeesWhatHappened(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	f := newProxied(t, 3, redlock.WithObserver(rec.observer()))
	ctx := context.Background()
	rec.reset()

	// Contention: 3 attempts, 2 pauses, one call that ends in contention.
	held, err := f.rl.Acquire(ctx, []string{"obs"}, 10*time.Second)
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"obs"}, time.Second, redlock.WithRetryCount(2), redlock.WithRetryDelay(10*time.Millisecond),
		redlock.WithWakeOnRelease(false))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	time.Sleep(50 * time.Millisecond)
	_, err = held.Release(ctx)
	require.NoError(t, err)
	rec.mu.Lock()
	require.Len(t, rec.calls, 3)
	assert.Equal(t, redlock.OutcomeOK, rec.calls[0].Outcome)
	assert.Equal(t, redlock.OutcomeContention, rec.calls[1].Outcome)
	assert.Equal(t, 3, rec.calls[1].Tries)
	assert.Len(t, rec.calls[1].Attempts, 3)
	assert.Equal(t, redlock.OpRelease, rec.calls[2].Op)
	assert.Len(t, rec.attempts, 1+3+1)
	assert.False(t, rec.attempts[1].Won)
	assert.Equal(t, 3, rec.attempts[3].Number)
	assert.Equal(t, time.Second-12*time.Millisecond, rec.attempts[1].Validity)
	assert.Len(t, rec.waits, 2)
	require.Len(t, rec.released, 1)
	assert.GreaterOrEqual(t, rec.released[0].Held, 50*time.Millisecond)
	locked := 0
	for _, v := range rec.votes {
		var rle *redlock.ResourceLockedError
		if errors.As(v, &rle) {
			locked++
		}
	}
	assert.GreaterOrEqual(t, locked, 6, "each contended attempt's 'held by another' votes")
	rec.mu.Unlock()

	// A hung minority node: its votes against are node timeouts.
	rec.reset()
	f.Proxies[2].Set(redistest.DropReplies)
	l, err := f.rl.Acquire(ctx, []string{"obs2"}, 10*time.Second)
	require.NoError(t, err)
	_, _ = l.Release(ctx)
	assert.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, v := range rec.votes {
			var nte *redlock.NodeTimeoutError
			if v.Node == 2 && errors.As(v, &nte) {
				return true
			}
		}
		return false
	}, 2*time.Second, 10*time.Millisecond, "the hung node's timeout reaches the observer")
	f.Proxies[2].Heal()

	// A lost lock: Using's extension fails, the observer hears of it.
	rec.reset()
	err = f.rl.Using(ctx, []string{"obs3"}, 700*time.Millisecond, func(ctx context.Context) error {
		for i := range 3 {
			f.Set(t, i, "obs3", "stolen", time.Minute)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, redlock.ErrExtensionFailed)
	rec.mu.Lock()
	require.Len(t, rec.lost, 1)
	assert.Equal(t, []string{"obs3"}, rec.lost[0].Resources)
	assert.ErrorIs(t, rec.lost[0].Err, redlock.ErrLockExpired)
	assert.Greater(t, rec.lost[0].Held, 100*time.Millisecond)
	require.Len(t, rec.usings, 1)
	assert.True(t, rec.usings[0].Ran)
	assert.True(t, rec.usings[0].Lost)
	assert.ErrorIs(t, rec.usings[0].Err, redlock.ErrExtensionFailed)
	rec.mu.Unlock()
}

// A hook that panics is not the engine's problem.
func TestObserverPanicIsContained(t *testing.T) {
	t.Parallel()
	boom := func() { panic("observer bug") }
	f := newNodes(t, 3, redlock.WithObserver(&redlock.Observer{
		Attempt: func(redlock.AttemptInfo) { boom() }, Done: func(redlock.CallInfo) { boom() },
		Released: func(redlock.ReleasedInfo) { boom() }, Vote: func(*redlock.NodeError) { boom() },
	}))
	l, err := f.rl.Acquire(context.Background(), []string{"p"}, time.Second)
	require.NoError(t, err)
	_, err = f.rl.Acquire(context.Background(), []string{"p"}, time.Second, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	_, err = l.Release(context.Background())
	require.NoError(t, err)
}

// An observer gets copies: scribbling on what it is given changes nothing
// the engine decides or the Lock reports.
func TestObserverCannotChangeTheLocking(t *testing.T) {
	t.Parallel()
	scribble := &redlock.Observer{
		Attempt: func(a redlock.AttemptInfo) {
			a.Resources[0] = "moved"
			if len(a.Stats.VotesFor) > 0 {
				a.Stats.VotesFor[0] = 99
			}
		},
		Done: func(c redlock.CallInfo) {
			c.Resources[0] = "scribbled"
			for i := range c.Attempts {
				c.Attempts[i].VotesFor = nil
				c.Attempts[i].QuorumSize = -7
			}
		},
		Vote: func(e *redlock.NodeError) { e.Err = errors.New(e.Err.Error()) }, // say, redacting
	}
	f := newNodes(t, 3, redlock.WithObserver(scribble))
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"real"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"real"}, l.Resources())
	assert.Equal(t, 2, l.Attempts()[0].QuorumSize)
	assert.NotContains(t, l.Attempts()[0].VotesFor, 99)
	// Contention still reads as contention, a retried Acquire still asks
	// for its own resource.
	_, err = f.rl.Acquire(ctx, []string{"real"}, time.Second, redlock.WithRetryCount(2), redlock.WithRetryDelay(5*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.Empty(t, f.Get(t, 0, "moved"))
	_, err = l.Release(ctx)
	require.NoError(t, err)
	for i := range 3 {
		f.gone(t, i, "real")
	}
}

// Every call that returns reaches Done, and every Using the Using hook:
// refused input, spent handles and second releases included, and a call's
// own WithObserver even when another of its options is bad.
func TestObserverSeesEveryReturn(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	f := newNodes(t, 3, redlock.WithObserver(rec.observer()))
	ctx := context.Background()
	count := func() int { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.calls) }
	l, err := f.rl.Acquire(ctx, []string{"every"}, time.Minute)
	require.NoError(t, err)
	nl, err := l.Extend(ctx, time.Minute)
	require.NoError(t, err)
	before := count()
	_, err = l.Extend(ctx, time.Minute) // spent
	require.ErrorIs(t, err, redlock.ErrLockExpired)
	_, err = nl.Extend(ctx, 0) // bad ttl
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = nl.Release(ctx)
	require.NoError(t, err)
	_, err = nl.Release(ctx) // again
	require.ErrorIs(t, err, redlock.ErrLockExpired)
	_, err = f.rl.Release(ctx, nil)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Equal(t, before+5, count(), "each of the 5 calls above reached Done")
	rec.mu.Lock()
	outcomes := []redlock.Outcome{}
	for _, c := range rec.calls[before:] {
		outcomes = append(outcomes, c.Outcome)
	}
	rec.mu.Unlock()
	assert.Equal(t, []redlock.Outcome{redlock.OutcomeExpired, redlock.OutcomeInvalid, redlock.OutcomeOK, redlock.OutcomeExpired, redlock.OutcomeInvalid}, outcomes)

	err = f.rl.Using(ctx, []string{"u"}, time.Millisecond, func(context.Context) error { return nil }) // ttl too short
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	rec.mu.Lock()
	require.Len(t, rec.usings, 1)
	assert.False(t, rec.usings[0].Ran)
	rec.mu.Unlock()

	// A call's own observer sees the call its bad option refuses.
	own := &recorder{}
	_, err = f.rl.Acquire(ctx, []string{"x"}, time.Second, redlock.WithObserver(own.observer()), redlock.WithRetryCount(-5))
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	own.mu.Lock()
	require.Len(t, own.calls, 1)
	assert.Equal(t, redlock.OutcomeInvalid, own.calls[0].Outcome)
	own.mu.Unlock()
}
