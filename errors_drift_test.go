package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// A ttl too short for the clock drift allowance is refused with the
// allowance as documented, round(driftFactor × ttl in ms) + 2ms, not the
// ttl it is capped at: a 1ms ttl's allowance is 2ms, a 100ms ttl's with
// WithDriftFactor(0.99) 101ms. (The errors said 1ms and 100ms: the ttl.)
// Nothing is sent: the client's address has no server.
func TestDriftErrorSaysTheAllowance(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	rl, err := redlock.New([]redis.UniversalClient{c})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	ctx := context.Background()
	fn := func(context.Context) error { t.Error("fn ran on a refused ttl"); return nil }
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		opts []redlock.Option
		want string
	}{
		{"1ms", time.Millisecond, nil,
			"redlock: invalid argument: ttl 1ms leaves no validity after the clock drift allowance of 2ms (WithDriftFactor): use a longer ttl"},
		{"2ms", 2 * time.Millisecond, nil,
			"redlock: invalid argument: ttl 2ms leaves no validity after the clock drift allowance of 2ms (WithDriftFactor): use a longer ttl"},
		{"100ms, drift 0.99", 100 * time.Millisecond, []redlock.Option{redlock.WithDriftFactor(0.99)},
			"redlock: invalid argument: ttl 100ms leaves no validity after the clock drift allowance of 101ms (WithDriftFactor): use a longer ttl"},
		{"100ms, drift 0.98", 100 * time.Millisecond, []redlock.Option{redlock.WithDriftFactor(0.98)},
			"redlock: invalid argument: ttl 100ms leaves no validity after the clock drift allowance of 100ms (WithDriftFactor): use a longer ttl"},
	} {
		_, err := rl.Acquire(ctx, []string{"drift"}, tc.ttl, tc.opts...)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, "Acquire(%v), %s", tc.ttl, tc.name)
		assert.EqualError(t, err, tc.want, "Acquire(%v), %s", tc.ttl, tc.name)
		err = rl.Using(ctx, []string{"drift"}, tc.ttl, fn, tc.opts...)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, "Using(%v), %s", tc.ttl, tc.name)
		assert.EqualError(t, err, tc.want, "Using(%v), %s", tc.ttl, tc.name)
	}
	// A ttl the allowance leaves 1ms of is taken (and fails on the node
	// that is not there, which is not an invalid argument).
	_, err = rl.Acquire(ctx, []string{"drift"}, 3*time.Millisecond, redlock.WithRetryCount(0))
	assert.NotErrorIs(t, err, redlock.ErrInvalidArgument, "Acquire(3ms)")
}
