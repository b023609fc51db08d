package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// TestAttemptStatesAreLetGo: an uncontended Acquire and its Release each
// let go of their attempt's state once the nodes have answered, so that
// the next attempt reuses it (issue 46: it was most of what an operation
// allocated). The suite runs with every other such state marked released
// instead (redlock.PoisonStates), so a handler that read one afterwards
// would panic in whichever test made it.
//
// Not parallel: it counts the states let go in the whole process, and the
// other tests' would count too, so that it could not fail beside them.
func TestAttemptStatesAreLetGo(t *testing.T) {
	rl := newNodes(t, 3).rl
	ctx := context.Background()
	back0, marked0 := redlock.StatesReused()
	const n = 50
	for i := range n {
		l, err := rl.Acquire(ctx, []string{"states:" + t.Name()}, 10*time.Second)
		require.NoError(t, err, "acquire %d", i)
		_, err = l.Release(ctx)
		require.NoError(t, err, "release %d", i)
	}
	// The last answers of an attempt decided at a quorum may come after
	// it returned: its state is let go then.
	require.Eventually(t, func() bool {
		back, marked := redlock.StatesReused()
		return back-back0+marked-marked0 >= 2*n
	}, 5*time.Second, 10*time.Millisecond, "each of the %d attempts let go of its state", 2*n)
}

// TestPlansAreGivenBack: an Acquire, an Extend and a Release each give
// their plan back when they return, for the next call to reuse. With the suite's
// redlock.PoisonStates, every other one is marked instead, and a step of a
// call that read it afterwards would panic in whichever test made it.
//
// Not parallel: it counts the plans given back in the whole process, and
// the other tests' would count too, so that it could not fail beside them.
func TestPlansAreGivenBack(t *testing.T) {
	rl := newNodes(t, 3).rl
	ctx := context.Background()
	const n = 20
	for i := range n {
		before := redlock.PlansFreed()
		l, err := rl.Acquire(ctx, []string{"plans:" + t.Name()}, 10*time.Second)
		require.NoError(t, err, "acquire %d", i)
		require.Greater(t, redlock.PlansFreed(), before, "acquire %d gave its plan back", i)
		before = redlock.PlansFreed()
		l, err = l.Extend(ctx, 10*time.Second)
		require.NoError(t, err, "extend %d", i)
		require.Greater(t, redlock.PlansFreed(), before, "extend %d gave its plan back", i)
		before = redlock.PlansFreed()
		_, err = l.Release(ctx)
		require.NoError(t, err, "release %d", i)
		require.Greater(t, redlock.PlansFreed(), before, "release %d gave its plan back", i)
	}
}
