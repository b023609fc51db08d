package redlock_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// handWait starts an Acquire of key that waits, and returns where its
// outcome arrives.
func handWait(rl *redlock.Redlock, key string, ttl time.Duration, opts ...redlock.Option) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := rl.Acquire(context.Background(), []string{key}, ttl, append([]redlock.Option{redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour)}, opts...)...)
		ch <- acquired{l, err}
	}()
	return ch
}

// unhurried is hand-over with a window of an hour, for the tests of what a
// hand-over does: the default window (100ms since the nodes granted the
// lock) passes while a loaded machine sets the waiter up, and the release
// is then a real one.
var unhurried = redlock.WithHandOver(16, time.Hour)

type acquired struct {
	l   *redlock.Lock
	err error
}

// holders reads which value each node holds for key.
func (f *fixture) holders(t *testing.T, key string) []string {
	t.Helper()
	out := make([]string, len(f.Peek))
	for i, p := range f.Peek {
		v, err := p.Get(context.Background(), key).Result()
		if err == nil {
			out[i] = v
		}
	}
	return out
}

// A Release while a waiter of the same Redlock waits hands the lock to it:
// nothing is sent, the nodes keep the value, which is now the waiter's, and
// the waiter's lock expires when the releasing holder's would have. The
// waiter's retry delay is an hour: only the hand-over can give it the lock.
func TestHandOverInProcess(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, unhurried)
	ctx := context.Background()
	var released []redlock.ReleasedInfo
	obs := redlock.WithObserver(&redlock.Observer{Released: func(i redlock.ReleasedInfo) { released = append(released, i) }})
	a, err := f.rl.Acquire(ctx, []string{"h"}, 10*time.Second, obs)
	require.NoError(t, err)
	b := handWait(f.rl, "h", 10*time.Second)
	queued(t, f.rl, "h", 1)
	until := a.Expiration()

	res, err := a.Release(ctx)
	require.NoError(t, err)
	assert.True(t, res.HandedOver, "handed over")
	assert.Empty(t, res.Attempts, "nothing sent")
	require.Len(t, released, 1, "the Released event is told, as for any release")
	assert.False(t, a.Valid(), "the releasing holder's handle is spent")
	_, err = a.Extend(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrLockExpired)

	got := <-b
	require.NoError(t, got.err)
	assert.Equal(t, a.Value(), got.l.Value(), "the nodes' value is the new holder's")
	// Acquire returned on a quorum; the won call to the last node may
	// still be on its way (a cold lane sets up first).
	require.Eventually(t, func() bool { return slices.Equal(f.holders(t, "h"), []string{a.Value(), a.Value(), a.Value()}) },
		5*time.Second, time.Millisecond, "every node holds the value: %q", f.holders(t, "h"))
	assert.True(t, got.l.Valid())
	assert.True(t, until.Equal(got.l.Expiration()), "validity is the releasing holder's: %v, not %v", until, got.l.Expiration())

	// The new holder extends and releases it as its own; with no one
	// waiting, the release deletes it.
	ext, err := got.l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	res, err = ext.Release(ctx)
	require.NoError(t, err)
	assert.False(t, res.HandedOver)
	assert.Eventually(t, func() bool { h := f.holders(t, "h"); return h[0]+h[1]+h[2] == "" }, time.Second, time.Millisecond,
		"no key left when no one waits (a release returns at its quorum)")
}

// A chain of hand-overs is bounded: after max of them in a row the lock is
// released for real, and the next waiter gets a new lock from the nodes.
func TestHandOverChainIsBounded(t *testing.T) {
	t.Parallel()
	const max = 3
	f := newNodes(t, 3, redlock.WithHandOver(max, time.Hour))
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"c"}, 10*time.Second)
	require.NoError(t, err)
	first := l.Value()
	var outs []<-chan acquired
	for i := range max + 1 {
		outs = append(outs, handWait(f.rl, "c", 10*time.Second, redlock.WithRetryDelay(20*time.Millisecond)))
		queued(t, f.rl, "c", i+1)
	}
	for i := range max + 1 {
		res, err := l.Release(ctx)
		require.NoError(t, err)
		assert.Equal(t, i < max, res.HandedOver, "release %d", i+1)
		var got acquired
		select {
		case got = <-outs[0]: // the longest waiter
		case <-time.After(10 * time.Second):
			t.Fatal("the longest waiter did not get the lock")
		}
		require.NoError(t, got.err)
		if i < max {
			assert.Equal(t, first, got.l.Value(), "hand-over %d keeps the value", i+1)
		} else {
			assert.NotEqual(t, first, got.l.Value(), "after %d hand-overs, a new grant", max)
		}
		l, outs = got.l, outs[1:]
	}
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// The chain's time bound: a lock granted longer ago than the window is
// released for real.
func TestHandOverWindow(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithHandOver(100, 50*time.Millisecond))
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"w"}, 10*time.Second)
	require.NoError(t, err)
	b := handWait(f.rl, "w", 10*time.Second, redlock.WithRetryDelay(20*time.Millisecond))
	queued(t, f.rl, "w", 1)
	time.Sleep(60 * time.Millisecond)
	res, err := l.Release(ctx)
	require.NoError(t, err)
	assert.False(t, res.HandedOver, "the window has passed")
	got := <-b
	require.NoError(t, got.err)
	assert.NotEqual(t, l.Value(), got.l.Value())
}

// Only a waiter with the same ttl, fencing and hand-over setting is handed
// the lock; WithHandOver(0, 0) on the release turns it off for that call.
func TestHandOverNeedsTheSameOptions(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	for name, c := range map[string]struct {
		waiter  []redlock.Option
		release []redlock.ReleaseOption
	}{
		"another ttl":    {waiter: []redlock.Option{redlock.WithRetryDelay(20 * time.Millisecond)}},
		"fenced waiter":  {waiter: []redlock.Option{redlock.WithFencing(true), redlock.WithRetryDelay(20 * time.Millisecond)}},
		"waiter refuses": {waiter: []redlock.Option{redlock.WithHandOver(0, 0), redlock.WithRetryDelay(20 * time.Millisecond)}},
		// The real release's announcement may come before the waiter's
		// first subscription is confirmed (a gap the doc bounds by one
		// retry delay): the waiter retries every 20ms, not every hour.
		"release refuses": {waiter: []redlock.Option{redlock.WithRetryDelay(20 * time.Millisecond)},
			release: []redlock.ReleaseOption{redlock.WithHandOver(0, 0)}},
	} {
		t.Run(name, func(t *testing.T) {
			key := "o:" + name
			l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
			require.NoError(t, err)
			ttl := 10 * time.Second
			if name == "another ttl" {
				ttl = 9 * time.Second
			}
			b := handWait(f.rl, key, ttl, c.waiter...)
			queued(t, f.rl, key, 1)
			res, err := l.Release(ctx, c.release...)
			require.NoError(t, err)
			assert.False(t, res.HandedOver)
			got := <-b
			require.NoError(t, got.err)
			_, err = got.l.Release(ctx)
			require.NoError(t, err)
		})
	}
}

// A fenced lock handed over draws a new token before its new holder runs:
// the old token + 1, on a quorum of the counters.
func TestHandOverFencedNewToken(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFencing(true), unhurried)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"f"}, 10*time.Second)
	require.NoError(t, err)
	b := handWait(f.rl, "f", 10*time.Second)
	queued(t, f.rl, "f", 1)
	res, err := l.Release(ctx)
	require.NoError(t, err)
	require.True(t, res.HandedOver)
	got := <-b
	require.NoError(t, got.err)
	assert.Equal(t, l.Token()+1, got.l.Token())
	n := 0
	for _, p := range f.Peek {
		if v, _ := p.Get(ctx, redlock.FenceKey("f")).Result(); v == strconv.FormatUint(got.l.Token(), 10) {
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 2, "the new token is on a quorum of counters")
	// The next fresh grant is above it.
	_, err = got.l.Release(ctx)
	require.NoError(t, err)
	n3, err := f.rl.Acquire(ctx, []string{"f"}, 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, n3.Token(), got.l.Token())
}

// A lock with less than half its ttl left is released for real: its new
// holder would start with too little.
func TestHandOverNotWhenLittleIsLeft(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"t"}, 400*time.Millisecond)
	require.NoError(t, err)
	b := handWait(f.rl, "t", 400*time.Millisecond, redlock.WithRetryDelay(20*time.Millisecond))
	queued(t, f.rl, "t", 1)
	time.Sleep(250 * time.Millisecond)
	res, err := l.Release(ctx)
	require.NoError(t, err)
	assert.False(t, res.HandedOver)
	got := <-b
	require.NoError(t, got.err)
	assert.NotEqual(t, l.Value(), got.l.Value())
}

// A release that starts while an Extend of the lock is in flight (a slow
// node) does not hand over: the extension may shorten the lock on the
// nodes after the hand-over counted its validity.
func TestHandOverNotDuringExtend(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"e"}, 10*time.Second)
	require.NoError(t, err)
	b := handWait(f.rl, "e", 10*time.Second, redlock.WithRetryDelay(20*time.Millisecond))
	queued(t, f.rl, "e", 1)
	for _, p := range f.Proxies {
		p.SetLatency(50*time.Millisecond, 0)
	}
	extended := make(chan error, 1)
	go func() { _, err := l.Extend(ctx, time.Second); extended <- err }()
	time.Sleep(20 * time.Millisecond) // the extension is out
	res, err := l.Release(ctx)
	require.NoError(t, err)
	assert.False(t, res.HandedOver, "an extension was in flight")
	<-extended
	for _, p := range f.Proxies {
		p.SetLatency(0, 0)
	}
	got := <-b
	require.NoError(t, got.err)
	_, err = got.l.Release(ctx)
	require.NoError(t, err)
}

// Under contention, hand-overs keep mutual exclusion, and a waiter that
// gives up while a lock is handed to it passes it on or releases it: when
// every call is over, no key is left.
func TestHandOverContended(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	var inside, violations, handed, grants atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for g := range 8 {
		spawn(&wg, func() {
			for time.Now().Before(deadline) {
				// Some callers give up soon: a hand-over may reach them
				// as they leave.
				wait := time.Second
				if g%2 == 1 {
					wait = time.Duration(1+g) * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				l, err := f.rl.Acquire(ctx, []string{"k"}, 10*time.Second, redlock.WithRetryCount(-1))
				cancel()
				if err != nil {
					continue
				}
				grants.Add(1)
				if inside.Add(1) > 1 {
					violations.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				res, err := l.Release(context.Background())
				if assert.NoError(t, err) && res.HandedOver {
					handed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, violations.Load())
	assert.Greater(t, handed.Load(), grants.Load()/4, "hand-overs happened (%d of %d grants)", handed.Load(), grants.Load())
	require.Eventually(t, func() bool {
		h := f.holders(t, "k")
		return h[0] == "" && h[1] == "" && h[2] == ""
	}, 2*time.Second, 10*time.Millisecond, "no key left once every call is over")
	t.Logf("%d grants, %d handed over", grants.Load(), handed.Load())
}

// After an extension to a shorter ttl, a hand-over passes the shorter
// expiration (the nodes keep the keys no longer), through whichever handle
// releases.
func TestHandOverAfterShorterExtend(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, unhurried)
	ctx := context.Background()
	for _, through := range []string{"new handle", "old handle"} {
		t.Run(through, func(t *testing.T) {
			key := "short:" + through
			l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
			require.NoError(t, err)
			ext, err := l.Extend(ctx, 4*time.Second)
			require.NoError(t, err)
			b := handWait(f.rl, key, 4*time.Second)
			queued(t, f.rl, key, 1)
			rel := ext
			if through == "old handle" {
				rel = l
			}
			res, err := rel.Release(ctx)
			require.NoError(t, err)
			require.True(t, res.HandedOver)
			got := <-b
			require.NoError(t, got.err)
			assert.False(t, got.l.Expiration().After(time.Now().Add(4*time.Second)), "expires %v from now, after the nodes' 4s",
				time.Until(got.l.Expiration()))
			// Every node keeps it at least until the holder's expiration,
			// once the won calls on their way to the slowest node landed
			// (the acquire's 10s, then the extension's 4s).
			for i, p := range f.Peek {
				require.Eventually(t, func() bool {
					pttl := p.PTTL(ctx, key).Val()
					return pttl >= 0 && !got.l.Expiration().After(time.Now().Add(pttl+time.Millisecond))
				}, 5*time.Second, time.Millisecond, "node %d keeps it %v", i, p.PTTL(ctx, key).Val())
			}
			_, err = got.l.Release(ctx)
			require.NoError(t, err)
		})
	}
}

// Out-of-range hand-over settings and the fair queue with another kind of
// lock are refused before anything is sent, with the option's name; the
// queue's keys are refused as resources.
func TestContendedBadInput(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 1)
	ctx := context.Background()
	for name, c := range map[string]struct {
		opts []redlock.Option
		says string
	}{
		"negative max":       {[]redlock.Option{redlock.WithHandOver(-1, time.Second)}, "WithHandOver"},
		"huge max":           {[]redlock.Option{redlock.WithHandOver(1<<21, time.Second)}, "WithHandOver"},
		"no window":          {[]redlock.Option{redlock.WithHandOver(4, 0)}, "WithHandOver"},
		"fair fenced":        {[]redlock.Option{redlock.WithFairQueue(true), redlock.WithFencing(true)}, "WithFairQueue"},
		"fair permits":       {[]redlock.Option{redlock.WithFairQueue(true), redlock.WithPermits(3)}, "WithFairQueue"},
		"fair shared":        {[]redlock.Option{redlock.WithFairQueue(true), redlock.WithShared(true)}, "WithFairQueue"},
		"queue as resource":  {nil, "redlock:queue:"},
		"qlive as resource":  {nil, "redlock:qlive:"},
		"off is not refused": {[]redlock.Option{redlock.WithHandOver(0, 0)}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			res := "bad"
			switch name {
			case "queue as resource":
				res = "redlock:queue:{x}:x"
			case "qlive as resource":
				res = "redlock:qlive:{x}:x"
			}
			l, err := f.rl.Acquire(ctx, []string{res}, time.Second, c.opts...)
			if c.says == "" {
				require.NoError(t, err)
				_, _ = l.Release(ctx)
				return
			}
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.Contains(t, err.Error(), c.says)
		})
	}
	_, err := redlock.New(f.Clients, redlock.WithHandOver(-1, 0))
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "New refuses it too")
}

// A Release that was sent and failed (its deletes may still land) is
// retried as the doc allows: the retry releases for real, never hands over
// a lock that may be gone. (A probe handed it over, and the deletes landed
// under the new holder.)
func TestHandOverNotAfterAFailedRelease(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithHandOver(16, time.Minute))
	ctx := context.Background()
	a, err := f.rl.Acquire(ctx, []string{"rr"}, 10*time.Second)
	require.NoError(t, err)
	for _, p := range f.Proxies {
		p.SetLatency(300*time.Millisecond, 0) // the deletes reach the nodes late
	}
	_, err = a.Release(ctx, redlock.WithRetryCount(0), redlock.WithNodeTimeout(20*time.Millisecond))
	require.Error(t, err)
	for _, p := range f.Proxies {
		p.SetLatency(0, 0)
	}
	b := handWait(f.rl, "rr", 10*time.Second, redlock.WithRetryDelay(20*time.Millisecond))
	queued(t, f.rl, "rr", 1)
	res, err := a.Release(ctx) // the retry
	if err == nil {
		assert.False(t, res.HandedOver, "a release was sent before: no hand-over")
	}
	got := <-b
	require.NoError(t, got.err)
	assert.NotEqual(t, a.Value(), got.l.Value(), "a new grant")
	_, err = got.l.Release(ctx)
	require.NoError(t, err)
}

// A fenced hand-over whose token cannot reach a quorum (two of three nodes
// partitioned) is not taken: the waiter never holds a lock with the old
// token, and it waits again, in the queue, so that the next release hands
// it the lock. (A probe found it out of the queue for good, waiting out its
// retry delay while the resource was free.)
func TestHandOverFencedTokenFailsWaiterQueuesAgain(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithFencing(true), unhurried)
	ctx := context.Background()
	a, err := f.rl.Acquire(ctx, []string{"fwb"}, time.Second)
	require.NoError(t, err)
	b := handWait(f.rl, "fwb", time.Second)
	queued(t, f.rl, "fwb", 1)
	f.Proxies[1].Set(redistest.Partition)
	f.Proxies[2].Set(redistest.Partition)
	res, err := a.Release(ctx)
	require.NoError(t, err)
	require.True(t, res.HandedOver)
	queued(t, f.rl, "fwb", 1) // its token was not written: it waits again
	select {
	case got := <-b:
		t.Fatalf("the waiter returned %v with token %d", got.err, got.l.Token())
	default:
	}
	f.Proxies[1].Set(redistest.Healthy)
	f.Proxies[2].Set(redistest.Healthy)
	// The deletes held for the partitioned nodes go out, and their
	// announcements wake the waiter (its retry delay is an hour): it is in
	// the queue again.
	select {
	case got := <-b:
		require.NoError(t, got.err)
		assert.Greater(t, got.l.Token(), a.Token(), "a new grant")
		_, err = got.l.Release(ctx)
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter is not woken: out of the queue")
	}
}
