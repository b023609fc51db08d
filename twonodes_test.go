package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// A Redlock on 2 real nodes: its quorum is both. It acquires, extends and
// releases; a second Redlock cannot take a lock held on both, nor one that
// the other node kept when a node restarted without its data; with a node
// down, Acquire ends with "no quorum" within its retries, not a hang. (New
// refused 2 nodes.)
func TestTwoNodes(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 2)
	client := &redis.Options{MaxRetries: -1, DialTimeout: 100 * time.Millisecond}
	f := newFixture(t, redistest.Setup{On: nodes, Client: client}, fast...)
	other, _ := ownRedlock(t, f, direct, fast...)
	ctx := context.Background()
	keys := []string{"two:a"}

	lock, err := f.rl.Acquire(ctx, keys, long)
	require.NoError(t, err, "Acquire(%q) on 2 nodes", keys)
	st := lock.Attempts()[0]
	assert.Equal(t, 2, st.MembershipSize)
	assert.Equal(t, 2, st.QuorumSize, "the quorum of 2 nodes is both")
	assertHeld(t, f, allNodes(2), keys, lock.Value(), long)

	_, err = other.Acquire(ctx, keys, long, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "second Redlock's Acquire(%q) while held on both", keys)
	ext, err := lock.Extend(ctx, long)
	require.NoError(t, err, "Extend")
	assertHeld(t, f, allNodes(2), keys, ext.Value(), long)
	_, err = ext.Release(ctx)
	require.NoError(t, err, "Release")
	for i := range 2 {
		f.gone(t, i, keys[0])
	}

	// A node restarted without its data: the other still holds the lock,
	// so no second holder gets in.
	lock, err = f.rl.Acquire(ctx, keys, long)
	require.NoError(t, err, "Acquire(%q) again", keys)
	nodes[1].Restart()
	_, err = other.Acquire(ctx, keys, long, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "second Redlock's Acquire(%q) with node 1 restarted empty", keys)
	assert.Equal(t, lock.Value(), f.Get(t, 0, keys[0]), "node 0 still holds the lock")
	_, _ = lock.Release(ctx) // node 1 lost its key: whether that is an error is not this test's
	f.gone(t, 0, keys[0])

	// A node down: no quorum, an error returned within the retries, not a hang.
	nodes[1].Kill()
	bounded := within(t, 10*time.Second)
	begin := time.Now()
	_, err = f.rl.Acquire(bounded, []string{"two:b"}, long, redlock.WithRetryCount(2))
	took := time.Since(begin)
	require.Error(t, err, "Acquire with node 1 down")
	require.NoError(t, bounded.Err(), "Acquire returned only when the test's bound ended it, after %v", took)
	assert.Contains(t, err.Error(), "no quorum", "Acquire with node 1 down = %v", err)
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	assert.Len(t, ee.Attempts, 3, "WithRetryCount(2): 3 attempts")
	t.Logf("Acquire with node 1 down, %v: %v", took, err)
}
