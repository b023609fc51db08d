package redlock_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// TestBadInputCampaign calls every exported function and option with nil,
// zero, negative, huge, NaN-like and duplicate values. Each call must return
// an error matching ErrInvalidArgument whose text names what was wrong, must
// not panic, and must send nothing to Redis (checked by a command counter on
// every client and by DBSIZE on every node).
func TestBadInputCampaign(t *testing.T) {
	t.Parallel()
	c := newNodes(t, 3)
	var sent atomic.Int32
	for _, cl := range c.Clients {
		cl.AddHook(countingHook(&sent))
	}
	ctx := context.Background()
	var nilCtx context.Context // a nil ctx, as a careless caller passes it

	// A real lock from another Redlock, and spare values.
	other := newNodes(t, 1)
	foreign, err := other.rl.Acquire(ctx, []string{"foreign"}, time.Hour)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = foreign.Release(ctx) })
	fn := func(context.Context) error { t.Error("fn ran on bad input"); return nil }
	var nilRedlock *redlock.Redlock
	var nilLock *redlock.Lock
	var typedNil *redis.Client

	ttls := map[string]time.Duration{
		"zero": 0, "-1ns": -1, "-1s": -time.Second, "min": math.MinInt64, "1ns": 1,
		"999us": 999 * time.Microsecond, "1.5ms": 1500 * time.Microsecond, "1ms (within drift)": time.Millisecond,
		"2ms (= drift)": 2 * time.Millisecond, "max (not whole ms)": math.MaxInt64,
	}
	resourceSets := map[string][]string{
		"nil": nil, "empty": {}, "empty name": {""}, "empty among others": {"a", "", "b"},
		"duplicate": {"a", "a"}, "duplicate far apart": {"a", "b", "c", "d", "a"},
		"10000 with one duplicate": append(manyKeys(9999), "k17"),
	}
	options := map[string]redlock.Option{
		"drift NaN": redlock.WithDriftFactor(math.NaN()), "drift +Inf": redlock.WithDriftFactor(math.Inf(1)),
		"drift -Inf": redlock.WithDriftFactor(math.Inf(-1)), "drift 1": redlock.WithDriftFactor(1),
		"drift -0.01": redlock.WithDriftFactor(-0.01), "drift huge": redlock.WithDriftFactor(math.MaxFloat64),
		"retry count -2": redlock.WithRetryCount(-2), "retry count min": redlock.WithRetryCount(math.MinInt),
		"retry delay -1ns": redlock.WithRetryDelay(-1), "retry delay min": redlock.WithRetryDelay(math.MinInt64),
		"retry jitter -1ns": redlock.WithRetryJitter(-1), "retry jitter min": redlock.WithRetryJitter(math.MinInt64),
		"threshold -1ns": redlock.WithAutomaticExtensionThreshold(-1),
		"node timeout 0": redlock.WithNodeTimeout(0), "node timeout -1s": redlock.WithNodeTimeout(-time.Second),
		"node timeout min": redlock.WithNodeTimeout(math.MinInt64),
		"node timeout 1ns": redlock.WithNodeTimeout(1), "node timeout 999us": redlock.WithNodeTimeout(999 * time.Microsecond),
		"node timeout max": redlock.WithNodeTimeout(math.MaxInt64), "retry delay max": redlock.WithRetryDelay(math.MaxInt64),
		"retry jitter max": redlock.WithRetryJitter(math.MaxInt64), "threshold max": redlock.WithAutomaticExtensionThreshold(math.MaxInt64),
	}

	type call struct {
		name string
		run  func() error
	}
	var calls []call
	add := func(name string, run func() error) { calls = append(calls, call{name, run}) }

	// New.
	add("New(nil)", func() error { _, err := redlock.New(nil); return err })
	add("New(empty)", func() error { _, err := redlock.New([]redis.UniversalClient{}); return err })
	add("New(nil client)", func() error { _, err := redlock.New([]redis.UniversalClient{c.Clients[0], nil}); return err })
	add("New(typed nil client)", func() error { _, err := redlock.New([]redis.UniversalClient{typedNil}); return err })
	add("New(same client twice)", func() error {
		_, err := redlock.New([]redis.UniversalClient{c.Clients[0], c.Clients[1], c.Clients[0]})
		return err
	})
	for name, o := range options {
		add("New(option "+name+")", func() error { _, err := redlock.New([]redis.UniversalClient{c.Clients[0]}, o); return err })
	}

	// Acquire and Using: every ttl, every resource set, every option.
	for name, ttl := range ttls {
		add("Acquire(ttl "+name+")", func() error { _, err := c.rl.Acquire(ctx, []string{"a"}, ttl); return err })
		add("Using(ttl "+name+")", func() error { return c.rl.Using(ctx, []string{"a"}, ttl, fn) })
	}
	for name, rs := range resourceSets {
		add("Acquire(resources "+name+")", func() error { _, err := c.rl.Acquire(ctx, rs, time.Second); return err })
		add("Using(resources "+name+")", func() error { return c.rl.Using(ctx, rs, time.Second, fn) })
	}
	for name, o := range options {
		add("Acquire(option "+name+")", func() error { _, err := c.rl.Acquire(ctx, []string{"a"}, time.Second, o); return err })
		add("Using(option "+name+")", func() error { return c.rl.Using(ctx, []string{"a"}, time.Second, fn, o) })
	}
	add("Acquire(nil ctx)", func() error { _, err := c.rl.Acquire(nilCtx, []string{"a"}, time.Second); return err })
	add("nil Redlock.Acquire", func() error { _, err := nilRedlock.Acquire(ctx, []string{"a"}, time.Second); return err })
	add("zero Redlock.Acquire", func() error { _, err := (&redlock.Redlock{}).Acquire(ctx, []string{"a"}, time.Second); return err })
	add("Using(nil fn)", func() error { return c.rl.Using(ctx, []string{"a"}, time.Second, nil) })
	add("Using(nil ctx)", func() error { return c.rl.Using(nilCtx, []string{"a"}, time.Second, fn) })
	add("Using(ttl below threshold+100ms)", func() error { return c.rl.Using(ctx, []string{"a"}, 599*time.Millisecond, fn) })
	add("Using(threshold above ttl)", func() error {
		return c.rl.Using(ctx, []string{"a"}, time.Second, fn, redlock.WithAutomaticExtensionThreshold(time.Hour))
	})
	add("Using(threshold 1ms, below the node timeout)", func() error {
		return c.rl.Using(ctx, []string{"a"}, time.Second, fn, redlock.WithAutomaticExtensionThreshold(time.Millisecond))
	})
	add("New(Ring)", func() error {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": c.Nodes[0].Addr(), "b": c.Nodes[1].Addr()}})
		defer ring.Close()
		_, err := redlock.New([]redis.UniversalClient{ring})
		return err
	})
	add("nil Redlock.Using", func() error { return nilRedlock.Using(ctx, []string{"a"}, time.Second, fn) })

	// Extend and Release: nil, zero and foreign locks, bad ttls and options.
	locks := map[string]*redlock.Lock{"nil": nilLock, "zero": {}, "of another Redlock": foreign}
	for name, l := range locks {
		add("Redlock.Extend("+name+" lock)", func() error { _, err := c.rl.Extend(ctx, l, time.Second); return err })
		add("Redlock.Release("+name+" lock)", func() error { _, err := c.rl.Release(ctx, l); return err })
		if l != foreign { // a foreign Lock's own methods are fine: it goes back to its Redlock
			add("Lock.Extend("+name+" lock)", func() error { _, err := l.Extend(ctx, time.Second); return err })
			add("Lock.Release("+name+" lock)", func() error { _, err := l.Release(ctx); return err })
		}
	}
	for name, ttl := range ttls {
		add("Extend(ttl "+name+")", func() error { _, err := foreign.Extend(ctx, ttl); return err })
	}
	for name, o := range options {
		if co, ok := o.(redlock.CallOption); ok { // Extend takes no lock-shaping option: that would not compile
			add("Extend(option "+name+")", func() error { _, err := foreign.Extend(ctx, time.Second, co); return err })
		}
	}
	// Release with a bad option releases all the same: TestReleaseWithABadOption.
	add("Extend(nil ctx)", func() error { _, err := foreign.Extend(nilCtx, time.Second); return err })
	add("Release(nil ctx)", func() error { _, err := foreign.Release(nilCtx); return err })

	// The foreign lock's Redlock listens for its force release: its
	// subscription's own commands come before the count.
	require.Eventually(t, func() bool {
		m, err := other.Peek[0].PubSubNumSub(ctx, redlock.ReleasedChannel).Result()
		return err == nil && m[redlock.ReleasedChannel] >= 1
	}, 5*time.Second, time.Millisecond, "the foreign lock's subscription")
	otherSent := atomic.Int32{}
	for _, cl := range other.Clients {
		cl.AddHook(countingHook(&otherSent))
	}
	for _, cl := range calls {
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s panicked: %v", cl.name, p)
				}
			}()
			err = cl.run()
		}()
		if assert.ErrorIs(t, err, redlock.ErrInvalidArgument, cl.name) {
			assert.True(t, strings.HasPrefix(err.Error(), "redlock: invalid argument: "), "%s: %q", cl.name, err)
		}
	}
	assert.Zero(t, sent.Load(), "commands sent to Redis by bad calls")
	assert.Zero(t, otherSent.Load(), "commands sent to the other Redlock's node by bad calls")
	for i := range 3 {
		assert.Zero(t, c.DBSize(t, i), "DBSIZE on node %d", i)
	}
	assert.True(t, foreign.Valid(), "bad calls left the foreign lock alone")
	t.Logf("bad-input campaign: %d calls, all refused with ErrInvalidArgument, nothing sent", len(calls))

	// The accessors and error types are safe on nil and zero values.
	assert.Nil(t, nilLock.Resources())
	assert.Equal(t, "", nilLock.Value())
	assert.True(t, nilLock.Expiration().IsZero())
	assert.False(t, nilLock.Valid())
	assert.Nil(t, nilLock.Attempts())
	assert.False(t, (&redlock.Lock{}).Valid())
	assert.Zero(t, nilRedlock.Nodes())
	assert.Zero(t, nilRedlock.Quorum())
	for _, e := range []error{&redlock.ExecutionError{}, &redlock.NodeError{}, &redlock.ResourceLockedError{}, &redlock.NodeTimeoutError{}} {
		assert.NotPanics(t, func() { _ = e.Error() }, "%T.Error()", e)
	}
}

func manyKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("k%d", i)
	}
	return ks
}

// Release never refuses to release a lock it holds: with an option out of
// range it releases with the other options, and says what was wrong with
// an error matching ErrInvalidArgument beside the result. The valid
// options still apply (a probe found WithHandOver(0, 0) and the observer
// dropped with the bad one): a real release stays real, and the
// observer hears of it.
func TestReleaseWithABadOption(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	for name, o := range map[string]redlock.ReleaseOption{
		"node timeout 0": redlock.WithNodeTimeout(0), "retry count -2": redlock.WithRetryCount(-2),
		"hand-over window 0":                  redlock.WithHandOver(4, 0),
		"drift, which a release does not use": redlock.WithDriftFactor(0.1),
	} {
		l, err := f.rl.Acquire(ctx, []string{"bad-release"}, 10*time.Second)
		require.NoError(t, err, name)
		res, err := l.Release(ctx, o)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		assert.Contains(t, err.Error(), "ignored: the release went on without it", name)
		require.NotNil(t, res, name)
		assert.False(t, l.Valid(), name)
		for i := range 3 { // the last node's delete may still be on its way
			assert.Eventually(t, func() bool { return f.DBSize(t, i) == 0 }, 5*time.Second, time.Millisecond, "%s: node %d", name, i)
		}
	}
	l, err := f.rl.Acquire(ctx, []string{"bad-release"}, 10*time.Second)
	require.NoError(t, err)
	b := make(chan error, 1)
	go func() {
		w, err := f.rl.Acquire(ctx, []string{"bad-release"}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(20*time.Millisecond))
		if err == nil {
			_, err = w.Release(ctx)
		}
		b <- err
	}()
	queued(t, f.rl, "bad-release", 1)
	released := 0
	obs := &redlock.Observer{Released: func(redlock.ReleasedInfo) { released++ }}
	res, err := l.Release(ctx, redlock.WithHandOver(0, 0), redlock.WithObserver(obs), redlock.WithRetryCount(-2))
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	require.NotNil(t, res)
	assert.False(t, res.HandedOver, "WithHandOver(0, 0) beside a bad option: a real release")
	assert.Equal(t, 1, released, "the observer given beside a bad option hears of the release")
	require.NoError(t, <-b, "the waiter takes the freed lock")
}
