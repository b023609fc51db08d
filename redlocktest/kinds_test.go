package redlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

// Every kind of lock runs its scripts on the kit's nodes as on
// redis-server (what the package doc promises).
func TestEveryKindOnTheNodes(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes)
	ctx := context.Background()
	try := redlock.WithRetryCount(0)

	t.Run("fenced", func(t *testing.T) {
		for want := uint64(1); want <= 2; want++ {
			l, err := rl.Acquire(ctx, []string{"fenced"}, time.Minute, redlock.WithFencing(true))
			require.NoError(t, err)
			assert.Equal(t, want, l.Token())
			_, err = l.Release(ctx)
			require.NoError(t, err)
		}
	})
	t.Run("semaphore", func(t *testing.T) {
		for range 2 {
			_, err := rl.Acquire(ctx, []string{"sem"}, time.Minute, redlock.WithPermits(2), try)
			require.NoError(t, err)
		}
		_, err := rl.Acquire(ctx, []string{"sem"}, time.Minute, redlock.WithPermits(2), try)
		assert.ErrorIs(t, err, redlock.ErrResourceLocked, "a third permit of 2")
	})
	t.Run("shared", func(t *testing.T) {
		for range 2 {
			_, err := rl.Acquire(ctx, []string{"doc"}, time.Minute, redlock.WithShared(true), try)
			require.NoError(t, err)
		}
		_, err := rl.Acquire(ctx, []string{"doc"}, time.Minute, try)
		assert.ErrorIs(t, err, redlock.ErrResourceLocked, "an exclusive lock beside readers")
		in, err := rl.Inspect(ctx, "doc")
		require.NoError(t, err)
		assert.Equal(t, redlock.KindShared, in.Kind)
		assert.Equal(t, 2, in.InUse)
	})
	// A waiter whose retry delay is 5s wakes on the release's announcement
	// (PUBLISH and SUBSCRIBE through the proxies), with or without the
	// fair queue.
	for name, opts := range map[string][]redlock.Option{"wake": nil, "fair queue": {redlock.WithFairQueue(true)}} {
		t.Run(name, func(t *testing.T) {
			res := "wait:" + name
			held, err := rl.Acquire(ctx, []string{res}, time.Minute)
			require.NoError(t, err)
			waiter := newRedlock(t, nodes)
			got := make(chan error, 1)
			go func() {
				opts := append(opts, redlock.WithRetryDelay(5*time.Second), redlock.WithRetryJitter(0))
				_, err := waiter.Acquire(ctx, []string{res}, time.Minute, opts...)
				got <- err
			}()
			time.Sleep(100 * time.Millisecond) // the waiter's first attempt failed
			released := time.Now()
			_, err = held.Release(ctx)
			require.NoError(t, err)
			select {
			case err := <-got:
				require.NoError(t, err)
				t.Logf("the waiter got the lock %v after the release", time.Since(released))
			case <-time.After(3 * time.Second):
				t.Fatal("a waiter with a 5s retry delay was not woken within 3s of the release")
			}
		})
	}
	t.Run("election", func(t *testing.T) {
		e := rl.Election("e")
		term, err := e.Campaign(ctx, "me", time.Second)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			l, err := e.Leader(ctx)
			return err == nil && l.ID == "me" && l.Term == term.Number()
		}, 2*time.Second, 10*time.Millisecond, "Leader() names the term's candidate")
		require.NoError(t, term.Resign(ctx))
	})
}

// What miniredis lacks, as the package doc says: WAIT answers 0 replicas
// and WAITAOF is unknown, so every vote with WithReplicaAck or WithAOFAck
// is against.
func TestAcknowledgementsAreRefused(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes)
	ctx := context.Background()
	_, err := rl.Acquire(ctx, []string{"r"}, time.Second, redlock.WithReplicaAck(1, 10*time.Millisecond), redlock.WithRetryCount(0))
	require.Error(t, err, "WithReplicaAck(1, ...)")
	var ack *redlock.ReplicaAckError
	_, against := votes(t, err)
	require.NotEmpty(t, against)
	assert.ErrorAs(t, against[0], &ack)

	_, err = rl.Acquire(ctx, []string{"r"}, time.Second, redlock.WithAOFAck(false, 1, 10*time.Millisecond), redlock.WithRetryCount(0))
	require.Error(t, err, "WithAOFAck(false, 1, ...)")
	t.Log(err)
	assert.Contains(t, err.Error(), "WAITAOF")
}
