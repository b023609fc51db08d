package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// The operator's view: Inspect from another process's Redlock shows each
// kind's holders with their identities, and ForceRelease takes a resource
// back for good.

const job = "job 7: nightly:backup % ü"

// inspect is Inspect from a Redlock of another process over f's nodes.
func inspect(t *testing.T, f *fixture, resource string) redlock.Inspection {
	t.Helper()
	// roomy: a fresh Redlock's first read sets up its connections, which
	// took over 100ms beside a CI run (a node then read Unknown).
	other, _ := ownRedlock(t, f, direct, roomy)
	in, err := other.Inspect(context.Background(), resource)
	require.NoError(t, err)
	return in
}

func TestInspectEveryKind(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithIdentity(job))
	ctx := context.Background()

	t.Run("free", func(t *testing.T) {
		in := inspect(t, f, "nothing")
		assert.Equal(t, redlock.Free, in.State)
		assert.Equal(t, redlock.KindNone, in.Kind)
		assert.Empty(t, in.Holders)
		assert.Equal(t, 3, in.Answered)
	})

	t.Run("fenced lock", func(t *testing.T) {
		l, err := f.rl.Acquire(ctx, []string{"plain"}, time.Minute, redlock.WithFencing(true))
		require.NoError(t, err)
		// Acquire returns at a quorum; the third node's write lands after.
		var in redlock.Inspection
		require.Eventually(t, func() bool {
			in = inspect(t, f, "plain")
			return len(in.Holders) == 1 && in.Holders[0].Nodes == 3
		}, 5*time.Second, 5*time.Millisecond, "the lock on every node")
		assert.Equal(t, redlock.Held, in.State)
		assert.Equal(t, redlock.KindLock, in.Kind)
		require.Len(t, in.Holders, 1)
		h := in.Holders[0]
		assert.Equal(t, l.Value(), h.Value)
		assert.Equal(t, job, h.Identity, "the identity, as given")
		assert.Equal(t, 3, h.Nodes)
		assert.True(t, h.OnQuorum)
		assert.Equal(t, l.Token(), h.Token)
		assert.Equal(t, l.Token(), in.Counter)
		assert.Greater(t, h.TTL, 50*time.Second)
		assert.LessOrEqual(t, h.TTL, time.Minute)
	})

	t.Run("semaphore", func(t *testing.T) {
		var locks []*redlock.Lock
		for range 2 {
			l, err := f.rl.Acquire(ctx, []string{"pool"}, time.Minute, redlock.WithPermits(3))
			require.NoError(t, err)
			locks = append(locks, l)
		}
		in := inspect(t, f, "pool")
		assert.Equal(t, redlock.KindSemaphore, in.Kind, "found without being told WithPermits")
		assert.Equal(t, redlock.Held, in.State)
		assert.Equal(t, 3, in.Permits)
		assert.Equal(t, 2, in.InUse, "permits in use")
		require.Len(t, in.Holders, 2)
		permits := map[int]bool{}
		for _, h := range in.Holders {
			assert.Contains(t, []string{locks[0].Value(), locks[1].Value()}, h.Value)
			assert.Equal(t, job, h.Identity)
			assert.True(t, h.OnQuorum)
			permits[h.Permit] = true
		}
		assert.Len(t, permits, 2, "two permits, each held once")
	})

	t.Run("shared with a writer waiting", func(t *testing.T) {
		for range 2 {
			_, err := f.rl.Acquire(ctx, []string{"cfg"}, time.Minute, redlock.WithShared(true))
			require.NoError(t, err)
		}
		_, err := f.rl.Acquire(ctx, []string{"cfg"}, time.Minute, redlock.WithRetryCount(0))
		require.ErrorIs(t, err, redlock.ErrResourceLocked)
		in := inspect(t, f, "cfg")
		assert.Equal(t, redlock.KindShared, in.Kind)
		assert.Equal(t, redlock.Held, in.State)
		assert.Equal(t, 2, in.InUse, "readers")
		assert.Len(t, in.Holders, 2)
		assert.True(t, in.WriterWaiting, "the exclusive attempt marked it")
	})

	t.Run("fair queue", func(t *testing.T) {
		l, err := f.rl.Acquire(ctx, []string{"fifo"}, time.Minute, redlock.WithFairQueue(true))
		require.NoError(t, err)
		settled(t, f, "fifo", l.Value()) // on every node before a waiter comes
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 2 {
			other, _ := ownRedlock(t, f, direct, redlock.WithFairQueue(true), redlock.WithIdentity("waiter "+string(rune('A'+i))))
			spawn(&wg, func() {
				_, _ = other.Acquire(wctx, []string{"fifo"}, time.Minute, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond))
			})
			queuedOnNodes(t, f, "fifo", int64(i+1))
		}
		in := inspect(t, f, "fifo")
		assert.Equal(t, redlock.KindLock, in.Kind)
		assert.Equal(t, l.Value(), in.Holders[0].Value)
		require.Len(t, in.Waiters, 2)
		assert.Equal(t, "waiter A", in.Waiters[0].Identity, "head first")
		assert.Equal(t, "waiter B", in.Waiters[1].Identity)
		assert.Equal(t, 3, in.Waiters[0].Nodes)
		// Handed to A: A holds it, and is no longer listed as waiting.
		_, err = l.Release(ctx)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			in = inspect(t, f, "fifo")
			return in.State == redlock.Held && len(in.Holders) == 1 && in.Holders[0].Identity == "waiter A"
		}, 5*time.Second, 10*time.Millisecond)
		require.Len(t, in.Waiters, 1, "%+v", in.Waiters)
		assert.Equal(t, "waiter B", in.Waiters[0].Identity)
		cancel()
		wg.Wait()
	})

	t.Run("election", func(t *testing.T) {
		term, err := f.rl.Election("jobs").Campaign(ctx, "candidate-1", time.Minute)
		require.NoError(t, err)
		defer func() { _ = term.Resign(ctx) }()
		require.Eventually(t, func() bool { return inspect(t, f, "redlock:election:jobs").Term == term.Number() }, 5*time.Second, 10*time.Millisecond)
		in := inspect(t, f, "redlock:election:jobs")
		assert.Equal(t, redlock.KindElection, in.Kind)
		assert.Equal(t, "candidate-1", in.Leader)
		require.Len(t, in.Holders, 1)
		assert.Equal(t, job, in.Holders[0].Identity)
		assert.Equal(t, term.Number(), in.Holders[0].Token)
	})
}

// A node that does not answer makes the verdict unknown where it matters,
// never free.
func TestInspectUnknownIsNeverFree(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3)
	ctx := context.Background()
	_, err := f.rl.Acquire(ctx, []string{"x"}, time.Minute)
	require.NoError(t, err)
	f.Proxies[0].Set(redistest.DropReplies)
	in, err := f.rl.Inspect(ctx, "x")
	require.NoError(t, err)
	assert.Equal(t, redlock.Held, in.State, "two of three hold it: held whatever the third says")
	assert.Equal(t, 2, in.Answered)
	require.Len(t, in.Errors, 1)
	var ne *redlock.NodeError
	require.ErrorAs(t, in.Errors[0], &ne)
	assert.Equal(t, 0, ne.Node)

	f.Proxies[1].Set(redistest.DropReplies)
	begin := time.Now()
	in, err = f.rl.Inspect(ctx, "x")
	assert.Less(t, time.Since(begin), time.Second, "Inspect waits for a silent node no longer than the node timeout (100ms) and a margin")
	require.NoError(t, err)
	assert.Equal(t, redlock.Unknown, in.State, "one node holds it, two could say anything")
	in, err = f.rl.Inspect(ctx, "free")
	require.NoError(t, err)
	assert.Equal(t, redlock.Unknown, in.State, "a free resource is unknown when two of three do not answer")
	f.Proxies[1].Heal()
	require.Eventually(t, func() bool {
		in, err = f.rl.Inspect(ctx, "free")
		return err == nil && in.Answered == 2
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, redlock.Free, in.State, "one silent node cannot make a quorum")
}

// A release that reaches the nodes apart (here a ForceRelease, 50ms later
// on two nodes of three) wakes the waiter on the first node's
// announcement; its attempt finds the two others still held, by the value
// being released, and their announcements wake it again: it gets the lock.
// (A CI run on 4c7fded: the waiter slept its 5s retry delay with the lock
// free. Those announcements were held back from a head whose attempt had
// not split the nodes, and an attempt decided by two nodes against it
// does not see the vote for of the node that had released.)
func TestReleaseReachingTheNodesApartWakesTheWaiterAgain(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	_, err := f.rl.Acquire(ctx, []string{"apart"}, 2*time.Hour)
	require.NoError(t, err)
	waiter, _ := ownRedlock(t, f, direct)
	got := acquiring(t, waiter, "apart", redlock.WithRetryDelay(5*time.Second), redlock.WithRetryJitter(0))
	queued(t, waiter, "apart", 1, f.Peek...)
	operator, mine := ownRedlock(t, f, ownProxies, roomy)
	warm(t, operator) // connections set up before the latency
	mine.proxies[1].SetLatency(50*time.Millisecond, 0)
	mine.proxies[2].SetLatency(50*time.Millisecond, 0)
	start := time.Now()
	require.NoError(t, operator.ForceRelease(ctx, "apart"))
	select {
	case at := <-got:
		t.Logf("the waiter (retry delay 5s) had the lock %v after ForceRelease", at.Sub(start))
		assert.Less(t, at.Sub(start), time.Second, "woken by the later nodes' announcements, not by its retry")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
}

// ForceRelease wakes a waiter whose retry delay is seconds: it gets the
// lock within a second.
func TestForceReleaseWakesAWaiter(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	old, err := f.rl.Acquire(ctx, []string{"job"}, 2*time.Hour)
	require.NoError(t, err)
	waiter, _ := ownRedlock(t, f, direct)
	got := acquiring(t, waiter, "job", redlock.WithRetryDelay(5*time.Second), redlock.WithRetryJitter(0))
	queued(t, waiter, "job", 1, f.Peek...)
	operator, _ := ownRedlock(t, f, direct, roomy)
	start := time.Now()
	require.NoError(t, operator.ForceRelease(ctx, "job"))
	select {
	case at := <-got:
		t.Logf("the waiter (retry delay 5s) had the lock %v after ForceRelease", at.Sub(start))
		assert.Less(t, at.Sub(start), time.Second, "woken by the release, not by its retry")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	_, err = old.Release(ctx)
	assert.ErrorIs(t, err, redlock.ErrLockExpired, "the old holder's release finds nothing of its own")
}

// A force-released holder never comes back: its Using ends at its next
// extension, even when a node lost the tombstone in a restart (where the
// extension restores keys), and its Release leaves the next holder alone.
// Its fencing token stays below the next one's.
func TestForceReleasedHolderNeverComesBack(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	ended := make(chan error, 1)
	started := make(chan uint64, 1)
	go func() {
		ended <- f.rl.Using(ctx, []string{"res"}, 2*time.Second, func(uctx context.Context) error {
			token, _ := redlock.TokenFrom(uctx)
			started <- token
			<-uctx.Done()
			return context.Cause(uctx)
		}, redlock.WithFencing(true), redlock.WithAutomaticExtensionThreshold(time.Second))
	}()
	oldToken := <-started
	operator, _ := ownRedlock(t, f, direct, roomy)
	in := inspect(t, f, "res")
	require.Len(t, in.Holders, 1)
	// Its token, or above where an earlier attempt of the same acquire
	// wrote its token back and failed (a loaded machine's -race run: 2).
	assert.GreaterOrEqual(t, in.Holders[0].Token, oldToken)
	require.NoError(t, operator.ForceRelease(ctx, "res", in.Holders[0].Value))
	// Node 0 restarts empty: the old holder's extension writes its key
	// there again, and still gets one vote of three.
	f.Nodes[0].Restart()
	select {
	case err := <-ended:
		assert.ErrorIs(t, err, redlock.ErrExtensionFailed)
	case <-time.After(10 * time.Second):
		t.Fatal("the force-released holder's Using went on")
	}
	next, err := operator.Acquire(ctx, []string{"res"}, time.Minute, redlock.WithFencing(true))
	require.NoError(t, err)
	assert.Greater(t, next.Token(), oldToken, "the counters were kept")
	assert.Eventually(t, func() bool {
		held := 0
		for _, p := range f.Peek {
			if p.Get(ctx, "res").Val() == next.Value() {
				held++
			}
		}
		return held >= 2
	}, time.Second, 10*time.Millisecond, "the new holder keeps a quorum")
	in = inspect(t, f, "res")
	assert.Equal(t, redlock.Held, in.State)
	assert.Equal(t, next.Value(), in.Holders[0].Value)
	_, err = next.Extend(ctx, time.Minute)
	assert.NoError(t, err)
}

// With values, ForceRelease takes one permit of a semaphore, or one reader
// of a shared lock; the others go on.
func TestForceReleaseOneHolder(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	operator, _ := ownRedlock(t, f, direct, roomy)

	a, err := f.rl.Acquire(ctx, []string{"pool"}, time.Minute, redlock.WithPermits(2))
	require.NoError(t, err)
	b, err := f.rl.Acquire(ctx, []string{"pool"}, time.Minute, redlock.WithPermits(2))
	require.NoError(t, err)
	require.NoError(t, operator.ForceRelease(ctx, "pool", a.Value()))
	in := inspect(t, f, "pool")
	assert.Equal(t, 1, in.InUse)
	assert.Equal(t, b.Value(), in.Holders[0].Value)
	_, err = f.rl.Extend(ctx, a, time.Minute)
	assert.ErrorIs(t, err, redlock.ErrLockExpired, "the removed permit's holder")
	_, err = f.rl.Extend(ctx, b, time.Minute)
	assert.NoError(t, err, "the other permit")
	c, err := f.rl.Acquire(ctx, []string{"pool"}, time.Minute, redlock.WithPermits(2), redlock.WithRetryCount(0))
	require.NoError(t, err, "the freed permit is free")
	require.NoError(t, operator.ForceRelease(ctx, "pool"))
	assert.Equal(t, redlock.Free, inspect(t, f, "pool").State)
	x, err := f.rl.Acquire(ctx, []string{"pool"}, time.Minute, redlock.WithRetryCount(0))
	require.NoError(t, err, "an exclusive lock once every permit is gone")
	_, err = c.Release(ctx)
	assert.Error(t, err)
	assert.Equal(t, x.Value(), inspect(t, f, "pool").Holders[0].Value, "the old permit's release left the new lock alone")

	r1, err := f.rl.Acquire(ctx, []string{"cfg"}, time.Minute, redlock.WithShared(true))
	require.NoError(t, err)
	r2, err := f.rl.Acquire(ctx, []string{"cfg"}, time.Minute, redlock.WithShared(true))
	require.NoError(t, err)
	require.NoError(t, operator.ForceRelease(ctx, "cfg", r1.Value()))
	_, err = f.rl.Extend(ctx, r1, time.Minute)
	assert.ErrorIs(t, err, redlock.ErrLockExpired, "the removed reader")
	r2, err = f.rl.Extend(ctx, r2, time.Minute)
	require.NoError(t, err, "the other reader")
	in = inspect(t, f, "cfg")
	assert.Equal(t, 1, in.InUse)
	require.NoError(t, operator.ForceRelease(ctx, "cfg"))
	_, err = f.rl.Extend(ctx, r2, time.Minute)
	assert.ErrorIs(t, err, redlock.ErrLockExpired)
	_, err = f.rl.Acquire(ctx, []string{"cfg"}, time.Minute, redlock.WithRetryCount(0))
	assert.NoError(t, err, "a writer once every reader is gone")
}

// Force-releasing an election's term deposes its leader; the next term is
// numbered above it.
func TestForceReleaseDeposesALeader(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, roomy)
	ctx := context.Background()
	term, err := f.rl.Election("e").Campaign(ctx, "first", 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, f.rl.ForceRelease(ctx, "redlock:election:e"))
	select {
	case <-term.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed term did not end")
	}
	other, _ := ownRedlock(t, f, direct)
	next, err := other.Election("e").Campaign(ctx, "second", time.Minute, redlock.WithRetryCount(0))
	require.NoError(t, err)
	assert.Greater(t, next.Number(), term.Number())
	_ = next.Resign(ctx)
}

func TestOperatorBadInput(t *testing.T) {
	t.Parallel()
	rl, err := redlock.New(miniClient(t))
	require.NoError(t, err)
	ctx := context.Background()
	for _, res := range []string{"", "redlock:fence:{x}:x", "redlock:permit:{x}:x:1"} {
		_, err := rl.Inspect(ctx, res)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "%q", res)
		assert.ErrorIs(t, rl.ForceRelease(ctx, res), redlock.ErrInvalidArgument, "%q", res)
	}
	assert.ErrorIs(t, rl.ForceRelease(ctx, "x", ""), redlock.ErrInvalidArgument)
	var nilRL *redlock.Redlock
	_, err = nilRL.Inspect(ctx, "x")
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.True(t, errors.Is(nilRL.ForceRelease(ctx, "x"), redlock.ErrInvalidArgument))
}

func miniClient(t *testing.T) []redis.UniversalClient {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return []redis.UniversalClient{c}
}

// On a Redis Cluster, Inspect and ForceRelease reach every kind's keys in
// the resource's slot, and a force release is announced on the resource's
// sharded channel (Redis 7.0 and later: on 6.2 the waiter waits its retry
// delay, by design).
func TestOperatorOnACluster(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Cluster: true}, redlock.WithIdentity(job), roomy)
	ctx := context.Background()
	sharded := redistest.Version(t).AtLeast(7, 0)
	if !sharded {
		t.Logf("by design: %s has no sharded pub/sub; the waiter waits its retry delay", redistest.Version(t))
	}
	for _, name := range []string{"plain", "{tag}x", "odd}name"} {
		_, err := f.rl.Acquire(ctx, []string{name}, time.Hour)
		require.NoError(t, err, name)
		in, err := f.rl.Inspect(ctx, name)
		require.NoError(t, err, name)
		assert.Equal(t, redlock.Held, in.State, name)
		assert.Equal(t, job, in.Holders[0].Identity, name)
		got := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			l, err := f.rl.Acquire(ctx, []string{name}, time.Minute, redlock.WithRetryDelay(5*time.Second), redlock.WithRetryJitter(0))
			if assert.NoError(t, err, name) {
				got <- time.Since(start)
				_, _ = l.Release(ctx)
			}
		}()
		require.Eventually(t, func() bool { // queued, and subscribed on the resource's shard
			ch := redlock.ShardedChannel(name)
			m, err := f.Cluster.MasterForKey(ctx, ch)
			return redlock.QueuedWaiters(f.rl, []string{name}) == 1 && (!sharded || err == nil && m.PubSubShardNumSub(ctx, ch).Val()[ch] >= 1)
		}, 10*time.Second, time.Millisecond, name)
		require.NoError(t, f.rl.ForceRelease(ctx, name), name)
		select {
		case d := <-got:
			if sharded {
				assert.Less(t, d, 4*time.Second, "%s: woken by the sharded announcement", name)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: the waiter did not get the lock", name)
		}

		a, err := f.rl.Acquire(ctx, []string{"pool" + name}, time.Minute, redlock.WithPermits(2))
		require.NoError(t, err, name)
		_, err = f.rl.Acquire(ctx, []string{"pool" + name}, time.Minute, redlock.WithPermits(2))
		require.NoError(t, err, name)
		in, err = f.rl.Inspect(ctx, "pool"+name)
		require.NoError(t, err, name)
		assert.Equal(t, redlock.KindSemaphore, in.Kind, name)
		assert.Equal(t, 2, in.InUse, name)
		require.NoError(t, f.rl.ForceRelease(ctx, "pool"+name, a.Value()), name)
		in, err = f.rl.Inspect(ctx, "pool"+name)
		require.NoError(t, err, name)
		assert.Equal(t, 1, in.InUse, name)

		_, err = f.rl.Acquire(ctx, []string{"cfg" + name}, time.Minute, redlock.WithShared(true))
		require.NoError(t, err, name)
		in, err = f.rl.Inspect(ctx, "cfg"+name)
		require.NoError(t, err, name)
		assert.Equal(t, redlock.KindShared, in.Kind, name)
		require.NoError(t, f.rl.ForceRelease(ctx, "cfg"+name), name)
		in, err = f.rl.Inspect(ctx, "cfg"+name)
		require.NoError(t, err, name)
		assert.Equal(t, redlock.Free, in.State, name)
	}
}

// A lock of the fair queue, force-released, goes to the queue's head.
func TestForceReleaseFairQueue(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	held, err := f.rl.Acquire(ctx, []string{"fifo"}, 2*time.Hour)
	require.NoError(t, err)
	settled(t, f, "fifo", held.Value()) // on every node before the waiter comes
	waiter, _ := ownRedlock(t, f, direct, redlock.WithFairQueue(true))
	got := acquiring(t, waiter, "fifo", redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Second))
	queuedOnNodes(t, f, "fifo", 1)
	start := time.Now()
	require.NoError(t, f.rl.ForceRelease(ctx, "fifo"))
	select {
	case at := <-got:
		t.Logf("the fair queue's head had the lock %v after ForceRelease", at.Sub(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the head of the queue did not get the lock")
	}
}

// A fair lock held by a waiter that took it from the queue (here: found
// free once the holder's ttl ran out) is force-released: the next waiter
// gets it within about the queue's liveness (a second), for as long as the
// holder's place lasts at the head.
func TestForceReleaseFairQueueHead(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	_, err := f.rl.Acquire(ctx, []string{"fifo"}, 1500*time.Millisecond)
	require.NoError(t, err)
	waiter := func(name string) chan *redlock.Lock {
		rl, _ := ownRedlock(t, f, direct, redlock.WithFairQueue(true), redlock.WithIdentity(name))
		out := make(chan *redlock.Lock, 1)
		go func() {
			l, err := rl.Acquire(ctx, []string{"fifo"}, 2*time.Hour, redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Second))
			if assert.NoError(t, err, name) {
				out <- l
			}
		}()
		return out
	}
	b := waiter("B")
	queuedOnNodes(t, f, "fifo", 1)
	var lb *redlock.Lock
	select {
	case lb = <-b: // the first lock expired: B found it free at the head
	case <-time.After(10 * time.Second):
		t.Fatal("B did not get the expired lock")
	}
	c := waiter("C")
	require.Eventually(t, func() bool {
		in := inspect(t, f, "fifo")
		return len(in.Waiters) > 0 && in.Waiters[len(in.Waiters)-1].Identity == "C" && in.Waiters[len(in.Waiters)-1].Nodes == 3
	}, 10*time.Second, 10*time.Millisecond, "C queued")
	start := time.Now()
	require.NoError(t, f.rl.ForceRelease(ctx, "fifo", lb.Value()))
	select {
	case <-c:
		t.Logf("C had the lock %v after B's force release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("C did not get the lock")
	}
}

// Found by the probes (issue 33's review), each failing before its fix.

// A shared lock taken over a tombstone lives as long as its readers, not as
// long as the tombstone (was: a writer refused for the old lock's hour).
func TestSharedLockOverATombstone(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, roomy)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"cfg"}, time.Hour)
	require.NoError(t, err)
	settled(t, f, "cfg", l.Value())
	require.NoError(t, f.rl.ForceRelease(ctx, "cfg"))
	_, err = f.rl.Acquire(ctx, []string{"cfg"}, time.Second, redlock.WithShared(true))
	require.NoError(t, err)
	settled(t, f, "cfg", "redlock:shared")
	for i := range f.Peek {
		assert.LessOrEqual(t, f.PTTL(t, i, "cfg"), time.Second, "node %d: the marker lives as long as its reader", i)
	}
}

// ForceRelease with a ctx already ended sends nothing (was: it released,
// and said it reached no node).
func TestForceReleaseWithAnEndedContext(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"x"}, time.Minute)
	require.NoError(t, err)
	settled(t, f, "x", l.Value())
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err = f.rl.ForceRelease(ended, "x")
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "reached 0 of 3 nodes")
	for i := range f.Peek {
		assert.Equal(t, l.Value(), f.Get(t, i, "x"), "node %d", i)
	}
	_, err = l.Extend(ctx, time.Minute)
	assert.NoError(t, err)
}

// A lock an Extend found gone stays lost: later Extends are not sent, so a
// rolling restart cannot let them restore it onto a quorum past the
// tombstones (was: the second Extend after two restarts succeeded).
func TestALostLockStaysLost(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithNodeTimeout(time.Second)) // the force release must reach every node
	ctx := context.Background()
	holder, _ := ownRedlock(t, f, direct)
	l, err := holder.Acquire(ctx, []string{"rr"}, time.Minute)
	require.NoError(t, err)
	// Acquire returns at a quorum: the third node's write may land after a
	// force release that ran at once, and with one more node restarted the
	// old holder would have a quorum (RELIABILITY.md, "Taking a lock back",
	// limits). An operator's force release comes after the lock settled.
	require.Eventually(t, func() bool { return inspect(t, f, "rr").Holders[0].Nodes == 3 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, f.rl.ForceRelease(ctx, "rr", l.Value()))
	f.Nodes[0].Restart()
	_, err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrLockExpired, "two tombstones of three")
	f.Nodes[1].Restart()
	_, err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrLockExpired, "lost for good")
	in := inspect(t, f, "rr")
	assert.NotEqual(t, redlock.Held, in.State, "%+v", in.Holders)
}

// A foreign value shorter than 32 characters, force-released, wakes the
// waiters (was: they slept their retry delay).
func TestForceReleaseOfAShortForeignValueWakes(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, roomy)
	ctx := context.Background()
	for i := range f.Peek {
		f.Set(t, i, "short", "x:y z", time.Hour)
	}
	got := acquiring(t, f.rl, "short", redlock.WithRetryDelay(5*time.Second), redlock.WithRetryJitter(0))
	queued(t, f.rl, "short", 1, f.Peek...)
	start := time.Now()
	require.NoError(t, f.rl.ForceRelease(ctx, "short", "x:y z"))
	select {
	case at := <-got:
		assert.Less(t, at.Sub(start), 2500*time.Millisecond, "woken, not retried after 5s")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
}

// Values that no node holds: ErrNotHeld, nothing released.
func TestForceReleaseOfValuesNotHeld(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, roomy)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"x"}, time.Minute)
	require.NoError(t, err)
	err = f.rl.ForceRelease(ctx, "x", "not-a-holder")
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	_, err = l.Extend(ctx, time.Minute)
	assert.NoError(t, err)
	assert.NoError(t, f.rl.ForceRelease(ctx, "free"), "a free resource: nothing to do")
}

// Using gives fn its lock's value, as Inspect shows it; an inner Using
// gives its own.
func TestValueFrom(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	_, ok := redlock.ValueFrom(ctx)
	assert.False(t, ok)
	err := f.rl.Using(ctx, []string{"outer"}, time.Minute, func(ctx context.Context) error {
		outer, ok := redlock.ValueFrom(ctx)
		require.True(t, ok)
		assert.Equal(t, outer, inspect(t, f, "outer").Holders[0].Value)
		return f.rl.Using(ctx, []string{"inner"}, time.Minute, func(ctx context.Context) error {
			inner, ok := redlock.ValueFrom(ctx)
			require.True(t, ok)
			assert.NotEqual(t, outer, inner)
			assert.Equal(t, inner, inspect(t, f, "inner").Holders[0].Value)
			_, fenced := redlock.TokenFrom(ctx)
			assert.False(t, fenced, "an unfenced inner lock hides the outer's token")
			return nil
		})
	}, redlock.WithFencing(true))
	require.NoError(t, err)
}

// settled waits until every node holds value under key ("": none): a call
// returns at its quorum, and its last node's write lands a moment later.
func settled(t *testing.T, f *fixture, key, value string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i := range f.Peek {
			if f.Get(t, i, key) != value {
				return false
			}
		}
		return true
	}, 5*time.Second, 2*time.Millisecond, "every node holds %q under %s", value, key)
}

// acquiring starts an Acquire of key for a minute, and returns a channel
// that receives when it got the lock (which it then releases). The test's
// end waits for the release, before its nodes stop (was: the goroutine
// outlived the test, found by the leak check).
func acquiring(t *testing.T, rl *redlock.Redlock, key string, opts ...redlock.Option) <-chan time.Time {
	got := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		l, err := rl.Acquire(ctx, []string{key}, time.Minute, opts...)
		if ctx.Err() != nil {
			return // the test ended first
		}
		if assert.NoError(t, err, key) {
			got <- time.Now()
			_, _ = l.Release(context.Background())
		}
	}()
	return got
}
