package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// Shared locks coexist and exclude an exclusive one, which excludes them;
// Extend and Release work on them; the last reader leaves nothing behind.
func TestSharedLocks(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	shared := redlock.WithShared(true)
	once := redlock.WithRetryCount(0)
	r1, err := f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, shared)
	require.NoError(t, err)
	r2, err := f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, shared)
	require.NoError(t, err, "readers coexist")
	_, err = f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, once)
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "a writer beside readers")
	_, err = f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, shared, once)
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "a writer waits: no new reader")

	r2x, err := r2.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	for _, l := range []*redlock.Lock{r1, r2x} {
		_, err = l.Release(ctx)
		require.NoError(t, err)
	}
	emptied(t, f, "every reader left")
	w, err := f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, once)
	require.NoError(t, err, "a writer once the readers left")
	_, err = f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, shared, once)
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "a reader beside a writer")
	_, err = w.Release(ctx)
	require.NoError(t, err)
	r3, err := f.rl.Acquire(ctx, []string{"config"}, 5*time.Second, shared, once)
	require.NoError(t, err)
	_, err = r3.Release(ctx)
	require.NoError(t, err)
}

// A waiting writer gets the lock within the hold of the readers already in,
// however many readers come and go: 6 readers re-acquire back to back.
func TestWriterIsNotStarved(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 6 {
		rl, _ := ownRedlock(t, f, viaF, fast...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := rl.Using(ctx, []string{"cfg"}, time.Second, func(context.Context) error {
					reads.Add(1)
					time.Sleep(20 * time.Millisecond)
					return nil
				}, redlock.WithShared(true), redlock.WithRetryCount(-1))
				if err != nil && !errors.Is(err, context.Canceled) {
					assert.NoError(t, err)
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return reads.Load() > 20 }, 10*time.Second, time.Millisecond, "readers overlap")
	var waits []time.Duration
	writer, _ := ownRedlock(t, f, viaF, fast...)
	for range 5 {
		start := time.Now()
		err := writer.Using(ctx, []string{"cfg"}, time.Second, func(context.Context) error {
			waits = append(waits, time.Since(start))
			return nil
		}, redlock.WithRetryCount(-1))
		require.NoError(t, err)
	}
	cancel()
	wg.Wait()
	t.Logf("a writer among 6 readers re-acquiring back to back waited %v (%d reads)", waits, reads.Load())
	for _, w := range waits {
		assert.Less(t, w, 5*time.Second, "the writer waits for the readers already in, not for ever")
	}
}

// A writer that gave up holds new readers off for at most WriterWaitsFor
// (2 s) after its last attempt, even while a reader that was in keeps
// extending. (Was: until every reader left, for ever under Using.)
func TestAGoneWriterHoldsReadersOffBriefly(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	shared := redlock.WithShared(true)
	long, err := f.rl.Acquire(ctx, []string{"doc"}, 30*time.Second, shared)
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"doc"}, 5*time.Second, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	gave := time.Now()
	_, err = f.rl.Acquire(ctx, []string{"doc"}, 5*time.Second, shared, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "the writer's mark keeps new readers out")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := f.rl.Acquire(rctx, []string{"doc"}, 5*time.Second, shared, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond))
	require.NoError(t, err, "a reader once the gone writer's mark lapsed")
	t.Logf("a new reader got in %v after the writer gave up", time.Since(gave).Round(time.Millisecond))
	for _, l := range []*redlock.Lock{r, long} {
		_, err := l.Release(ctx)
		require.NoError(t, err)
	}
}

// A writer of several resources marks every one that readers hold: a
// reader that comes after it began waiting is kept out of each. (Was: only
// the first was marked.)
func TestAWriterMarksEveryResource(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shared := redlock.WithShared(true)
	ra, err := f.rl.Acquire(ctx, []string{"a"}, 10*time.Second, shared)
	require.NoError(t, err)
	rb, err := f.rl.Acquire(ctx, []string{"b"}, 10*time.Second, shared)
	require.NoError(t, err)
	writer, _ := ownRedlock(t, f, viaF, fast...)
	got := make(chan error, 1)
	go func() {
		l, err := writer.Acquire(ctx, []string{"a", "b"}, 5*time.Second, redlock.WithRetryCount(-1))
		if err == nil {
			_, err = l.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { // the writer tried, and marked both on a quorum
		n := 0
		for i := range f.Peek {
			if strings.HasPrefix(f.Get(t, i, "a"), "redlock:shared:w:") && strings.HasPrefix(f.Get(t, i, "b"), "redlock:shared:w:") {
				n++
			}
		}
		return n >= 2
	}, 10*time.Second, time.Millisecond)
	_, err = f.rl.Acquire(ctx, []string{"b"}, 10*time.Second, shared, redlock.WithRetryCount(0))
	assert.ErrorIs(t, err, redlock.ErrResourceLocked, "a late reader of b while the writer waits")
	for _, l := range []*redlock.Lock{ra, rb} {
		_, err := l.Release(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, <-got, "the writer, once the readers in before it left")
}
