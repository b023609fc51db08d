package redlock_test

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// TestFIPS runs the main operations, each of the library's scripts among
// them, on real nodes. .ci/run runs it again with GODEBUG=fips140=only (FIPS
// 140-3 mode, where crypto/sha1 panics): the library computes no SHA-1, its
// script hashes are generated ahead of time (internal/script/hashes.go).
// Tests that use miniredis cannot run in that mode (miniredis hashes every
// script it is given with crypto/sha1); neither can a test file with a
// package-level redis.NewScript (go-redis hashes it at init; the test
// binary panics before any test runs).
func TestFIPS(t *testing.T) {
	t.Parallel()
	t.Logf("crypto/fips140.Enabled() = %v; SHA-1 refused (GODEBUG=fips140=only): %v", fips140.Enabled(), sha1Refused())
	f := newNodes(t, 3)
	ctx := context.Background()
	// with is a Redlock over f's clients with opts, closed when t ends.
	with := func(t *testing.T, opts ...redlock.Option) *redlock.Redlock {
		rl, err := redlock.New(f.Clients, opts...)
		require.NoError(t, err, "New(%d clients)", len(f.Clients))
		t.Cleanup(func() { _ = rl.Close() })
		return rl
	}

	t.Run("Acquire Extend Release", func(t *testing.T) {
		keys := []string{"fips:plain:a", "fips:plain:b"}
		l, err := f.rl.Acquire(ctx, keys, 10*time.Second)
		require.NoError(t, err, "Acquire(%q)", keys)
		_, err = f.rl.Acquire(ctx, keys[1:], 10*time.Second, redlock.WithRetryCount(0))
		assert.ErrorIs(t, err, redlock.ErrResourceLocked, "Acquire(%q) of a held resource", keys[1:])
		l, err = l.Extend(ctx, 20*time.Second)
		require.NoError(t, err, "Extend")
		assert.Greater(t, time.Until(l.Expiration()), 10*time.Second, "Extend(20s) left")
		_, err = l.Release(ctx)
		require.NoError(t, err, "Release")
		l, err = f.rl.Acquire(ctx, keys[1:], 10*time.Second)
		require.NoError(t, err, "Acquire(%q) after the Release", keys[1:])
		_, err = l.Release(ctx)
		require.NoError(t, err, "Release")
	})

	t.Run("Using", func(t *testing.T) {
		// 1 s, for 1.5 s: Using's extender extends it (at 500 ms left).
		err := f.rl.Using(ctx, []string{"fips:using"}, time.Second, func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(1500 * time.Millisecond):
				return nil
			}
		})
		require.NoError(t, err, "Using(1s) of a 1.5 s fn")
	})

	t.Run("fenced", func(t *testing.T) {
		rl := with(t, redlock.WithFencing(true))
		key := []string{"fips:fenced"}
		l, err := rl.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err, "fenced Acquire")
		first := l.Token()
		require.NotZero(t, first, "Token()")
		l, err = l.Extend(ctx, 10*time.Second)
		require.NoError(t, err, "fenced Extend")
		_, err = l.Release(ctx)
		require.NoError(t, err, "fenced Release")
		err = rl.Using(ctx, key, 10*time.Second, func(ctx context.Context) error {
			token, ok := redlock.TokenFrom(ctx)
			assert.True(t, ok, "TokenFrom in Using's fn")
			assert.Greater(t, token, first, "the next holder's token")
			return nil
		})
		require.NoError(t, err, "fenced Using")
	})

	t.Run("permits", func(t *testing.T) {
		rl := with(t, redlock.WithPermits(2))
		key := []string{"fips:permits"}
		a, err := rl.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err, "the first permit")
		b, err := rl.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err, "the second permit")
		_, err = rl.Acquire(ctx, key, 10*time.Second, redlock.WithRetryCount(0))
		assert.ErrorIs(t, err, redlock.ErrResourceLocked, "a third permit of 2")
		b, err = b.Extend(ctx, 10*time.Second)
		require.NoError(t, err, "Extend of a permit")
		for _, l := range []*redlock.Lock{a, b} {
			_, err = l.Release(ctx)
			require.NoError(t, err, "Release of a permit")
		}
	})

	t.Run("shared", func(t *testing.T) {
		rl := with(t, redlock.WithShared(true))
		key := []string{"fips:shared"}
		a, err := rl.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err, "the first shared lock")
		b, err := rl.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err, "the second shared lock")
		_, err = f.rl.Acquire(ctx, key, 10*time.Second, redlock.WithRetryCount(0))
		assert.ErrorIs(t, err, redlock.ErrResourceLocked, "an exclusive lock of a shared resource")
		a, err = a.Extend(ctx, 10*time.Second)
		require.NoError(t, err, "Extend of a shared lock")
		for _, l := range []*redlock.Lock{a, b} {
			_, err = l.Release(ctx)
			require.NoError(t, err, "Release of a shared lock")
		}
		l, err := f.rl.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err, "an exclusive lock once the readers left")
		_, err = l.Release(ctx)
		require.NoError(t, err, "Release")
	})

	t.Run("election", func(t *testing.T) {
		e := f.rl.Election("fips")
		// 1 s, kept for 1.5 s: the term's extensions record the leader.
		term, err := e.Campaign(ctx, "a", time.Second)
		require.NoError(t, err, "Campaign")
		require.NotZero(t, term.Number(), "the term's number")
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, term.Context().Err(), "the term's context after 1.5 s of a 1 s ttl")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			leader, err := e.Leader(ctx)
			assert.NoError(c, err, "Leader")
			assert.Equal(c, redlock.Leader{ID: "a", Term: term.Number()}, leader, "Leader")
		}, 10*time.Second, 10*time.Millisecond)
		require.NoError(t, term.Resign(ctx), "Resign")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := e.Leader(ctx)
			assert.ErrorIs(c, err, redlock.ErrNoLeader, "Leader after Resign")
		}, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("fair queue", func(t *testing.T) {
		rl := with(t, redlock.WithFairQueue(true))
		other, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
		key := "fips:fair"
		l, err := rl.Acquire(ctx, []string{key}, 10*time.Second)
		require.NoError(t, err, "Acquire")
		settled(t, f, key, l.Value()) // on every node before the waiter comes
		got := make(chan acquired, 1)
		go func() {
			nl, err := other.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			got <- acquired{nl, err}
		}()
		queuedOnNodes(t, f, key, 1)
		_, err = l.Release(ctx)
		require.NoError(t, err, "Release while a waiter queues")
		select {
		case a := <-got:
			require.NoError(t, a.err, "the queued Acquire")
			_, err = a.l.Release(ctx)
			require.NoError(t, err, "Release")
		case <-time.After(10 * time.Second):
			t.Fatal("the head of the queue did not get the lock within 10 s of the Release")
		}
	})
}

// sha1Refused reports whether this process refuses SHA-1, as it does under
// GODEBUG=fips140=only (crypto/fips140 of Go 1.24 cannot tell "only" from
// "on").
func sha1Refused() (refused bool) {
	if !fips140.Enabled() {
		return false
	}
	defer func() { refused = recover() != nil }()
	sha1.Sum(nil)
	return false
}
