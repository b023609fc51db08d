package redlock_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// Messages that say what they count and what to do (issue 44): the
// answers heard before the outcome was certain and the nodes not waited
// for, a full semaphore named so, advice that works when followed.

// TestContentionCountsWhatItHeard: a lock held on all 5 nodes, tried once:
// the message counts the "held" answers that decided it, and says how many
// nodes were not waited for (it read "on 3 of 5 nodes" when all 5 held it).
func TestContentionCountsWhatItHeard(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 5)
	ctx := context.Background()
	other, _ := ownRedlock(t, f, direct)
	l, err := other.Acquire(ctx, []string{"c"}, time.Minute)
	require.NoError(t, err)
	settled(t, f, "c", l.Value())
	re := regexp.MustCompile(`held by another lock on (\d) of 5 nodes \(quorum 3(?:; (\d) not waited for once that decided it)?\)`)
	for range 20 {
		_, err = f.rl.Acquire(ctx, []string{"c"}, time.Minute, redlock.WithRetryCount(0))
		require.ErrorIs(t, err, redlock.ErrResourceLocked)
		m := re.FindStringSubmatch(err.Error())
		require.NotNil(t, m, "%v", err)
		held, _ := strconv.Atoi(m[1])
		unheard, _ := strconv.Atoi(m[2])
		assert.GreaterOrEqual(t, held, 3, "%v", err)
		assert.Equal(t, 5, held+unheard, "every node is either counted or said not waited for: %v", err)
	}
}

// TestNoQuorumCountsWhatItHeard: two nodes of three down, the third
// healthy: the attempt is decided by the two refusals, and the message
// says the healthy node was not waited for when it had not answered (it
// read "0 of 3 nodes voted for" as if the healthy node had voted against).
func TestNoQuorumCountsWhatItHeard(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, fast...)
	warm(t, f.rl)
	f.Nodes[0].Kill()
	f.Nodes[1].Kill()
	re := regexp.MustCompile(`no quorum: (\d) of 3 nodes voted for, 2 needed(?: \((\d) voted against; (\d) not waited for once that decided it\))?`)
	for range 10 {
		_, err := f.rl.Acquire(context.Background(), []string{"q"}, time.Minute, redlock.WithRetryCount(0))
		require.Error(t, err)
		m := re.FindStringSubmatch(err.Error())
		require.NotNil(t, m, "%v", err)
		votedFor, _ := strconv.Atoi(m[1])
		if m[2] != "" {
			against, _ := strconv.Atoi(m[2])
			unheard, _ := strconv.Atoi(m[3])
			assert.Equal(t, 3, votedFor+against+unheard, "%v", err)
		}
	}
}

// TestFullSemaphoreIsNamedSo: a semaphore whose permits are all taken is
// "full", not "held by another lock".
func TestFullSemaphoreIsNamedSo(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	var held []*redlock.Lock
	for range 2 {
		l, err := f.rl.Acquire(ctx, []string{"sem"}, time.Minute, redlock.WithPermits(2))
		require.NoError(t, err)
		held = append(held, l)
	}
	require.Eventually(t, func() bool { return inspect(t, f, "sem").InUse == 2 }, 5*time.Second, 5*time.Millisecond)
	_, err := f.rl.Acquire(ctx, []string{"sem"}, time.Minute, redlock.WithPermits(2), redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	assert.Regexp(t, `full: every permit taken on [23] of 3 nodes`, err.Error())
	for _, l := range held {
		_, err = l.Release(ctx)
		require.NoError(t, err)
	}
	// An exclusive lock there is still "held by another lock".
	x, err := f.rl.Acquire(ctx, []string{"sem"}, time.Minute)
	require.NoError(t, err)
	settled(t, f, "sem", x.Value())
	_, err = f.rl.Acquire(ctx, []string{"sem"}, time.Minute, redlock.WithPermits(2), redlock.WithRetryCount(0))
	assert.Regexp(t, `held by another lock on [23] of 3 nodes`, err.Error())
}

// TestTTLAdviceWorks: the advice a ttl error gives, followed, gives a ttl
// that is taken (a ttl of 10, meant as seconds, was told to round it to
// the millisecond, which gives 0).
func TestTTLAdviceWorks(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 1)
	ctx := context.Background()
	_, err := f.rl.Acquire(ctx, []string{"t"}, 10)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "10*time.Second")
	assert.NotContains(t, err.Error(), "Round")
	_, err = f.rl.Acquire(ctx, []string{"t"}, 1500*time.Microsecond)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "ttl.Round(time.Millisecond)")
	l, err := f.rl.Acquire(ctx, []string{"t"}, (1500*time.Microsecond).Round(time.Millisecond)+10*time.Millisecond)
	require.NoError(t, err, "the advice followed")
	_, _ = l.Release(ctx)
}

// TestRetryWindowWithHungNodes: with the default retries and 2 of 3 nodes
// hung, a failing Acquire returns within the window WithRetryCount's doc
// gives: n × (delay + jitter) + (n+1) × the node timeout (README said "about
// 2s"; it took 3.3-3.5 s).
func TestRetryWindowWithHungNodes(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3)
	f.Proxies[0].Set(redistest.DropReplies)
	f.Proxies[1].Set(redistest.DropReplies)
	start := time.Now()
	_, err := f.rl.Acquire(context.Background(), []string{"w"}, 10*time.Second)
	took := time.Since(start)
	require.Error(t, err)
	const n, delay, jitter, nodeTimeout = 10, 200 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond
	bound := n*(delay+jitter) + (n+1)*nodeTimeout
	t.Logf("2 of 3 nodes hung, default retries: Acquire failed after %v (documented bound %v)", took.Round(time.Millisecond), bound)
	assert.LessOrEqual(t, took, bound+200*time.Millisecond, "the retry window WithRetryCount documents (+200ms for a loaded machine's timers)")
}
