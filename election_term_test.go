package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// A lost lock's context (Using's fn's, a term's) ends before the end of the
// lock's validity, at its cancel point (the validity's end less a quarter
// of the threshold, 100ms at most), whatever way the extensions fail:
// each waited out between two tries, each on its way when the cancel point
// comes, or the lock gone. (Was: at the validity's end, plus the failed
// Extend's return and the timers' lateness; the safety harness saw lost
// terms' contexts end up to 18ms after it.) The bound is asserted, not the
// time: the figures are logged.

// validity follows the end of a lock's validity as the library computed it
// for its newest grant or extension (what Lock.Expiration says), through
// the observer.
type validity struct{ until atomic.Int64 }

func (v *validity) option() redlock.Option {
	return redlock.WithObserver(&redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if a.Won && (a.Op == redlock.OpAcquire || a.Op == redlock.OpExtend) {
			v.until.Store(a.Stats.Start.Add(a.Validity).UnixNano())
		}
	}})
}

func (v *validity) end() time.Time { return time.Unix(0, v.until.Load()) }

// Short ttls: the extension threshold 150ms, so the cancel point is 37.5ms
// before the validity's end.
const (
	lostTTL       = 300 * time.Millisecond
	lostThreshold = 150 * time.Millisecond
	lostMargin    = lostThreshold / 4
)

// lossCase is one way a lock's extensions fail, made from inside the
// critical section.
type lossCase struct {
	name  string
	opts  []redlock.Option // for the Redlock
	call  []redlock.Option // for Using or Campaign
	fault func(t *testing.T, f *fixture, key string)
	// early: the extension learns at once that the lock is gone, long
	// before the cancel point.
	early bool
}

func lossCases() []lossCase {
	majority := func(fault redistest.Fault) func(*testing.T, *fixture, string) {
		return func(_ *testing.T, f *fixture, _ string) {
			f.Proxies[1].Set(fault)
			f.Proxies[2].Set(fault)
		}
	}
	return []lossCase{
		{
			// One try per retry window, then a retry delay longer than the
			// ttl: the cancel point comes during the wait.
			name: "partitioned, waiting between tries", opts: []redlock.Option{redlock.WithNodeTimeout(50 * time.Millisecond)},
			call:  []redlock.Option{redlock.WithRetryCount(0), redlock.WithRetryDelay(time.Second), redlock.WithRetryJitter(0)},
			fault: majority(redistest.Partition),
		},
		{
			// Tries every 10ms: the cancel point comes during one.
			name: "partitioned, retrying", opts: []redlock.Option{redlock.WithNodeTimeout(50 * time.Millisecond)},
			call:  []redlock.Option{redlock.WithRetryCount(-1), redlock.WithRetryDelay(10 * time.Millisecond), redlock.WithRetryJitter(5 * time.Millisecond)},
			fault: majority(redistest.Partition),
		},
		{
			// The node timeout is the threshold: the one extension's
			// attempt is on its way from 150ms before the validity's end
			// to its end, past the cancel point.
			name: "hung, the extension on its way", opts: []redlock.Option{redlock.WithNodeTimeout(lostThreshold)},
			call:  []redlock.Option{redlock.WithRetryCount(0)},
			fault: majority(redistest.DropReplies),
		},
		{
			// Another holder's value on every node (it expires after a
			// ttl): the next extension finds the lock gone.
			name: "taken over", opts: []redlock.Option{redlock.WithNodeTimeout(50 * time.Millisecond)},
			fault: func(t *testing.T, f *fixture, key string) {
				for i := range f.Nodes {
					f.Set(t, i, key, "thief", lostTTL)
				}
			},
			early: true,
		},
	}
}

// checkEnded asserts that a lost lock's context ended before its validity,
// and logs by how much.
func checkEnded(t *testing.T, what string, ended time.Time, v *validity, early bool) {
	t.Helper()
	until := v.end()
	require.False(t, until.IsZero(), "%s: the observer saw no grant", what)
	before := until.Sub(ended)
	t.Logf("%s: the context ended %v before the validity's end (cancel point: %v before)", what, before.Round(10*time.Microsecond), lostMargin)
	assert.True(t, ended.Before(until), "%s: the context ended %v after the validity's end", what, -before)
	if !early {
		// Not given up long before the cancel point either: the lock was
		// valid, and an extension might still have got through.
		assert.Less(t, before, lostMargin+50*time.Millisecond, "%s: the context ended long before the cancel point", what)
	}
}

// fn's context ends before the lock's validity when the extensions fail,
// and Using says the lock was lost.
func TestUsingLostLockEndsFnBeforeItsValidity(t *testing.T) {
	t.Parallel()
	for _, c := range lossCases() {
		t.Run(c.name, func(t *testing.T) {
			v := &validity{}
			f := newProxied(t, 3, append(c.opts, redlock.WithAutomaticExtensionThreshold(lostThreshold), v.option())...)
			key := "{redlock}lost"
			var ended time.Time
			var cause error
			err := f.rl.Using(context.Background(), []string{key}, lostTTL, func(ctx context.Context) error {
				c.fault(t, f, key)
				<-ctx.Done()
				ended, cause = time.Now(), context.Cause(ctx)
				return cause
			}, c.call...)
			assert.ErrorIs(t, cause, redlock.ErrExtensionFailed, "fn's context.Cause")
			assert.ErrorIs(t, err, redlock.ErrExtensionFailed, "Using")
			checkEnded(t, "fn's", ended, v, c.early)
			t.Logf("cause: %v", cause)
		})
	}
}

// A lost term's context ends before the term's validity, with Campaign
// (Term.Context) and with Lead (fn's context).
func TestLostTermEndsBeforeItsValidity(t *testing.T) {
	t.Parallel()
	for _, c := range lossCases() {
		t.Run(c.name, func(t *testing.T) {
			v := &validity{}
			f := newProxied(t, 3, append(c.opts, redlock.WithAutomaticExtensionThreshold(lostThreshold))...)
			key := "redlock:election:lost"
			ctx := within(t, 10*time.Second)
			term, err := f.rl.Election("lost").Campaign(ctx, "campaign", lostTTL, append(c.call, v.option())...)
			require.NoError(t, err)
			c.fault(t, f, key)
			<-term.Context().Done()
			ended := time.Now()
			assert.ErrorIs(t, context.Cause(term.Context()), redlock.ErrExtensionFailed, "the term's context.Cause")
			checkEnded(t, "Campaign's term", ended, v, c.early)
			_ = term.Resign(ctx)
			for _, p := range f.Proxies {
				p.Heal()
			}

			v2 := &validity{}
			err = f.rl.Election("lost").Lead(ctx, "lead", lostTTL, func(ctx context.Context) error {
				c.fault(t, f, key)
				<-ctx.Done()
				ended = time.Now()
				return context.Cause(ctx)
			}, append(c.call, v2.option())...)
			assert.ErrorIs(t, err, redlock.ErrExtensionFailed, "Lead")
			checkEnded(t, "Lead's fn's", ended, v2, c.early)
		})
	}
}

// Extensions that are slow but get through before the cancel point keep
// the lock: fn's context never ends (each takes 70ms of the 150ms
// threshold, done 80ms before the validity's end, 42.5ms before the cancel
// point).
func TestSlowExtensionsKeepTheLock(t *testing.T) {
	// Not in parallel: round trips of 70ms against a cancel point 37.5ms
	// before the validity's end leave no room for other tests' load.
	f := newProxied(t, 3, redlock.WithNodeTimeout(lostThreshold), redlock.WithAutomaticExtensionThreshold(lostThreshold))
	for _, p := range f.Proxies {
		p.SetLatency(35*time.Millisecond, 35*time.Millisecond)
	}
	var extended atomic.Int32
	count := redlock.WithObserver(&redlock.Observer{Done: func(ci redlock.CallInfo) {
		if ci.Op == redlock.OpExtend && ci.Err == nil {
			extended.Add(1)
		}
	}})
	err := f.rl.Using(context.Background(), []string{"{redlock}slow"}, lostTTL, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(4 * lostTTL):
			return nil
		}
	}, count)
	require.NoError(t, err, "Using with slow extensions")
	assert.GreaterOrEqual(t, extended.Load(), int32(4), "extensions that got through")
}

// An observer's Lost hook may end the term it is told of: Resign does not
// wait for the extension whose hook called it (it did, and that extension
// for Resign: both for ever).
func TestLostHookMayResignItsTerm(t *testing.T) {
	t.Parallel()
	var term atomic.Pointer[redlock.Term]
	resigned := make(chan error, 1)
	obs := &redlock.Observer{Lost: func(redlock.LostInfo) {
		if tm := term.Load(); tm != nil {
			resigned <- tm.Resign(context.Background())
		}
	}}
	f := newNodes(t, 3, redlock.WithObserver(obs))
	tm, err := f.rl.Election("hook").Campaign(context.Background(), "me", time.Second)
	require.NoError(t, err)
	term.Store(tm)
	for _, p := range f.Peek { // gone from every node: the next extension finds it so
		require.NoError(t, p.Del(context.Background(), electionKey("hook")).Err())
	}
	select {
	case err := <-resigned:
		if err != nil { // the release found it gone, as the hook was told
			require.ErrorIs(t, err, redlock.ErrLockExpired)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Lost hook's Resign did not return")
	}
	<-tm.Context().Done()
}
