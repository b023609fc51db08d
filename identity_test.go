package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

func TestIdentity(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"web-1/4242", job, "a:b:c", "100%", "  spaced  ", strings.Repeat("x", redlock.MaxIdentity)} {
		v := redlock.ValueWithIdentity(id)
		assert.Equal(t, id, redlock.IdentityOf(v), "%q", id)
		assert.NotContains(t, v, ":", "an election record splits at ':'")
		assert.NotContains(t, v, " ")
	}
	assert.Equal(t, "", redlock.IdentityOf("0123456789abcdef0123456789abcdef"), "a value that records none")
	assert.Equal(t, "", redlock.IdentityOf("node-redlock's value"))
	def := redlock.ValueWithIdentity(redlock.DefaultIdentity())
	assert.Contains(t, redlock.IdentityOf(def), "/", "host/pid")
	assert.LessOrEqual(t, len(redlock.DefaultIdentity()), redlock.MaxIdentity)
	for _, bad := range []string{strings.Repeat("x", redlock.MaxIdentity+1), "tab\there", "nl\n", string([]byte{0xff})} {
		_, err := redlock.New(miniClient(t), redlock.WithIdentity(bad))
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "%q", bad)
		assert.ErrorContains(t, err, "WithIdentity")
	}
}

// A value that records an identity is as opaque to node-redlock as before:
// each excludes the other, each releases its own, and Inspect shows a
// node-redlock lock with no identity.
func TestIdentityWithNodeRedlock(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithIdentity(job), roomy)
	ctx := context.Background()
	nodeAcquire := func(key, value string) (won int) {
		for _, p := range f.Peek {
			if n, _ := p.Eval(ctx, nodeRedlockAcquire, []string{key}, value, 60000).Int(); n == 1 {
				won++
			}
		}
		return won
	}
	ours, err := f.rl.Acquire(ctx, []string{"shared-with-node"}, time.Minute)
	require.NoError(t, err)
	settled(t, f, "shared-with-node", ours.Value())
	assert.Equal(t, 0, nodeAcquire("shared-with-node", "node-value-1"), "node-redlock is excluded by a value with an identity")
	_, err = ours.Release(ctx)
	require.NoError(t, err)
	settled(t, f, "shared-with-node", "")
	assert.Equal(t, 3, nodeAcquire("shared-with-node", "node-value-1"))
	_, err = f.rl.Acquire(ctx, []string{"shared-with-node"}, time.Minute, redlock.WithRetryCount(0))
	assert.ErrorIs(t, err, redlock.ErrResourceLocked, "node-redlock's lock excludes ours")
	in := inspect(t, f, "shared-with-node")
	require.Len(t, in.Holders, 1)
	assert.Equal(t, "node-value-1", in.Holders[0].Value)
	assert.Equal(t, "", in.Holders[0].Identity)
	require.NoError(t, f.rl.ForceRelease(ctx, "shared-with-node"))
	// The tombstone lasts what the lock had left plus 2 s; node-redlock
	// waits for it as it would have for the lock.
	for i := range f.Peek {
		pttl := f.PTTL(t, i, "shared-with-node")
		assert.Greater(t, pttl, 58*time.Second, "node %d", i)
		assert.LessOrEqual(t, pttl, 62*time.Second, "node %d", i)
	}
	assert.Equal(t, 0, nodeAcquire("shared-with-node", "node-value-2"), "node-redlock waits out the tombstone")
	_, err = f.rl.Acquire(ctx, []string{"shared-with-node"}, time.Minute, redlock.WithRetryCount(0))
	assert.NoError(t, err, "a force-released node-redlock lock is free to us")
}
