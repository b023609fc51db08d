package redlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

// Lose inside Using's fn cancels fn's context with a cause matching
// ErrExtensionFailed, and Using returns an error matching it.
func TestLoseCancelsUsing(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes, redlock.WithAutomaticExtensionThreshold(150*time.Millisecond), redlock.WithNodeTimeout(150*time.Millisecond))
	var cause error
	err := rl.Using(context.Background(), []string{"r"}, 300*time.Millisecond, func(ctx context.Context) error {
		require.NoError(t, nodes.Lose("r"), "Lose of a lock Using holds")
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(5 * time.Second):
			t.Error("fn's context still live 5s after Lose (ttl 300ms)")
		}
		return nil
	})
	assert.ErrorIs(t, cause, redlock.ErrExtensionFailed, "fn's context's cause")
	assert.ErrorIs(t, err, redlock.ErrExtensionFailed, "Using's error")
}

// Lose takes a lock whatever the faults: with one node down and another
// hung, and an extension then fails with ErrLockExpired (not for want of
// a quorum) once the nodes are back, while another Redlock takes the lock
// at once.
func TestLoseWhateverTheFaults(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	holder, other := newRedlock(t, nodes), newRedlock(t, nodes)
	warm(t, holder)
	ctx := context.Background()
	lock, err := holder.Acquire(ctx, []string{"r"}, time.Minute)
	require.NoError(t, err)

	nodes.Down(0)
	nodes.Hang(1)
	start := time.Now()
	require.NoError(t, nodes.Lose("r"), "Lose with node 0 down and node 1 hung")
	assert.Less(t, time.Since(start), time.Second, "Lose waited for a faulted node")
	nodes.Heal(0)
	nodes.Heal(1)

	ctx5, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = lock.Extend(ctx5, time.Minute)
	assert.ErrorIs(t, err, redlock.ErrLockExpired, "Extend of a lost lock")
	_, err = other.Acquire(ctx5, []string{"r"}, time.Minute)
	assert.NoError(t, err, "Acquire of a lost lock by another")
}

// Lose works on every kind: a semaphore's permits, a shared lock's readers,
// a fenced lock (whose next token is still greater), an election's term.
func TestLoseEveryKind(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes)
	ctx := context.Background()
	extendFails := func(what string, locks ...*redlock.Lock) {
		t.Helper()
		for i, l := range locks {
			_, err := l.Extend(ctx, time.Minute)
			assert.ErrorIs(t, err, redlock.ErrLockExpired, "Extend of %s %d after Lose", what, i)
		}
	}

	var permits []*redlock.Lock
	for range 2 {
		l, err := rl.Acquire(ctx, []string{"sem"}, time.Minute, redlock.WithPermits(2))
		require.NoError(t, err)
		permits = append(permits, l)
	}
	require.NoError(t, nodes.Lose("sem"))
	extendFails("a permit", permits...)

	var readers []*redlock.Lock
	for range 2 {
		l, err := rl.Acquire(ctx, []string{"doc"}, time.Minute, redlock.WithShared(true))
		require.NoError(t, err)
		readers = append(readers, l)
	}
	require.NoError(t, nodes.Lose("doc"))
	extendFails("a reader", readers...)

	fenced, err := rl.Acquire(ctx, []string{"acct"}, time.Minute, redlock.WithFencing(true))
	require.NoError(t, err)
	require.NoError(t, nodes.Lose("acct"))
	extendFails("a fenced lock", fenced)
	next, err := rl.Acquire(ctx, []string{"acct"}, time.Minute, redlock.WithFencing(true), redlock.WithRetryCount(0))
	require.NoError(t, err, "Acquire of a lost fenced lock")
	assert.Greater(t, next.Token(), fenced.Token(), "the next holder's token")

	e := rl.Election("scheduler")
	term, err := e.Campaign(ctx, "me", time.Second)
	require.NoError(t, err)
	require.NoError(t, nodes.Lose("redlock:election:scheduler"))
	select {
	case <-term.Context().Done():
		assert.ErrorIs(t, context.Cause(term.Context()), redlock.ErrExtensionFailed, "the lost term's context's cause")
	case <-time.After(5 * time.Second):
		t.Error("the term's context still live 5s after Lose (ttl 1s)")
	}
}

// What Lose returns when there is nothing to lose, or nothing it may.
func TestLoseErrors(t *testing.T) {
	nodes := redlocktest.New(t, 3)
	rl := newRedlock(t, nodes)
	ctx := context.Background()

	err := nodes.Lose("nobody")
	assert.ErrorIs(t, err, redlock.ErrNotHeld, "Lose of a resource never locked")
	assert.Contains(t, err.Error(), `Lose("nobody")`)

	_, err = rl.Acquire(ctx, []string{"twice"}, time.Minute)
	require.NoError(t, err)
	// Acquire returns at a quorum: a Lose before the last node's write
	// lands there misses it (ForceRelease's limit), and the second Lose
	// would find that holder. Lose as an operator does, once it settled.
	require.Eventually(t, func() bool {
		in, err := rl.Inspect(ctx, "twice")
		return err == nil && len(in.Holders) == 1 && in.Holders[0].Nodes == 3
	}, 5*time.Second, 5*time.Millisecond, "the lock on every node")
	require.NoError(t, nodes.Lose("twice"))
	assert.ErrorIs(t, nodes.Lose("twice"), redlock.ErrNotHeld, "the second Lose (tombstones are no holder)")

	lock, err := rl.Acquire(ctx, []string{"released"}, time.Minute)
	require.NoError(t, err)
	_, err = lock.Release(ctx)
	require.NoError(t, err)
	// Release returns at a quorum; Lose sees the last node's key until its
	// delete lands there.
	require.Eventually(t, func() bool {
		in, err := rl.Inspect(ctx, "released")
		return err == nil && len(in.Holders) == 0
	}, 5*time.Second, 5*time.Millisecond, "a released lock's keys gone from every node")
	assert.ErrorIs(t, nodes.Lose("released"), redlock.ErrNotHeld, "Lose of a released lock")

	_, err = rl.Acquire(ctx, []string{"expired"}, 100*time.Millisecond)
	require.NoError(t, err)
	// Expired on every node: the last node's write may have landed later.
	require.Eventually(t, func() bool {
		in, err := rl.Inspect(ctx, "expired")
		return err == nil && len(in.Holders) == 0
	}, 5*time.Second, 5*time.Millisecond, "the lock expired on every node")
	assert.ErrorIs(t, nodes.Lose("expired"), redlock.ErrNotHeld, "Lose of an expired lock")

	for _, bad := range []string{"", "redlock:fence:x"} {
		err := nodes.Lose(bad)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "Lose(%q)", bad)
		assert.False(t, errors.Is(err, redlock.ErrNotHeld), "Lose(%q) = %v", bad, err)
	}

	require.NoError(t, rl.Close())
	nodes.Close()
	err = nodes.Lose("nobody")
	assert.EqualError(t, err, `redlocktest: Lose("nobody") after Close`)
}

// Lose works on any number of nodes (2 among them), and on a lock another client took with its own
// value (a SET NX, node-redlock).
func TestLoseOnTwoNodes(t *testing.T) {
	nodes := redlocktest.New(t, 2)
	ctx := context.Background()
	for _, c := range nodes.Clients() {
		require.NoError(t, c.SetNX(ctx, "r", "another client's value", time.Minute).Err())
	}
	require.NoError(t, nodes.Lose("r"))
	assert.ErrorIs(t, nodes.Lose("r"), redlock.ErrNotHeld, "the second Lose")
}
