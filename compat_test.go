package redlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// The servers users run, and what each feature does there: README's
// compatibility table is drawn from compatFeatures (TestCompatibilityTable
// keeps it equal), and TestCompatibility checks on real nodes that the
// server the tests run (REDISTEST_SERVER_DIR; .ci/run's matrix runs it on
// each of ../shared/servers) does what its column says.

// support is what a feature does on a server.
type support string

const (
	works        support = "yes"
	byRetryDelay support = "retry delay" // works; a waiter wakes at its retry delay, not at the release
	refused      support = "refused"     // every call is refused with an error naming the server's version
)

// compatServers are the table's columns: the servers .ci/run's matrix
// tests (the default, Debian's 7.0, and ../shared/servers).
var compatServers = []redistest.Server{{Name: "Redis", Major: 6, Minor: 2}, {Name: "Redis", Major: 7}, {Name: "Redis", Major: 7, Minor: 2}, {Name: "Valkey", Major: 8}}

type compatFeature struct {
	name  string
	on    func(redistest.Server) support
	check func(t *testing.T, want support)
}

func everywhere(redistest.Server) support { return works }

// since is a feature that needs Redis major.minor, and does otherwise
// before.
func since(major, minor int, otherwise support) func(redistest.Server) support {
	return func(s redistest.Server) support {
		if s.AtLeast(major, minor) {
			return works
		}
		return otherwise
	}
}

var compatFeatures = []compatFeature{
	{"locks: Acquire, Extend, Release", everywhere, checkLock},
	{"fencing tokens", everywhere, checkFencing},
	{"Using", everywhere, checkUsing},
	{"wake on release", everywhere, checkWake},
	{"a Cluster as a node", everywhere, checkCluster},
	{"wake on release on a Cluster (SSUBSCRIBE)", since(7, 0, byRetryDelay), checkClusterWake},
	{"a Sentinel group as a node", everywhere, checkSentinel},
	{"WithReplicaAck (WAIT)", everywhere, checkWait},
	{"WithAOFAck (WAITAOF)", since(7, 2, refused), checkWaitAOF},
	{"leader election", everywhere, checkElection},
	{"semaphores, shared locks", everywhere, checkPermits},
	{"fair queue", everywhere, checkFair},
}

// On the server the tests run, every feature does what the table says.
func TestCompatibility(t *testing.T) {
	t.Parallel()
	s := redistest.Version(t)
	t.Logf("server: %s", s)
	for _, f := range compatFeatures {
		t.Run(f.name, func(t *testing.T) {
			want := f.on(s)
			f.check(t, want)
			if want != works {
				t.Logf("by design on %s: %s", s, want)
			}
		})
	}
}

// README's table is compatTable's.
func TestCompatibilityTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	want := "<!-- compat: drawn from compat_test.go's compatFeatures, kept equal by TestCompatibilityTable -->\n" + compatTable() + "<!-- /compat -->\n"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md lacks the compatibility table; put this in it:\n%s", want)
	}
}

func compatTable() string {
	var b strings.Builder
	b.WriteString("| feature |")
	for _, s := range compatServers {
		fmt.Fprintf(&b, " %s %d.%d |", s.Name, s.Major, s.Minor)
	}
	b.WriteString("\n|---|")
	for range compatServers {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, f := range compatFeatures {
		b.WriteString("| " + f.name + " |")
		for _, s := range compatServers {
			b.WriteString(" " + string(f.on(s)) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func checkLock(t *testing.T, _ support) {
	f := newNodes(t, 3)
	other, _ := ownRedlock(t, f, viaF)
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"compat:lock"}, 10*time.Second)
	require.NoError(t, err)
	_, err = other.Acquire(ctx, []string{"compat:lock"}, 10*time.Second, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	l, err = l.Extend(ctx, 20*time.Second)
	require.NoError(t, err)
	_, err = l.Release(ctx)
	require.NoError(t, err)
	l, err = other.Acquire(ctx, []string{"compat:lock"}, 10*time.Second, redlock.WithRetryCount(0))
	require.NoError(t, err, "free once released")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

func checkFencing(t *testing.T, _ support) {
	f := newNodes(t, 3)
	ctx := context.Background()
	var last uint64
	for range 3 {
		l, err := f.rl.Acquire(ctx, []string{"compat:fenced"}, 10*time.Second, redlock.WithFencing(true))
		require.NoError(t, err)
		assert.Greater(t, l.Token(), last, "each holder's token above the last")
		last = l.Token()
		_, err = l.Release(ctx)
		require.NoError(t, err)
	}
}

func checkUsing(t *testing.T, _ support) {
	f := newNodes(t, 3)
	const ttl = time.Second
	err := f.rl.Using(context.Background(), []string{"compat:using"}, ttl, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(2 * ttl): // past the first ttl: Using extended it
		}
		return nil
	}, redlock.WithAutomaticExtensionThreshold(ttl/2))
	require.NoError(t, err, "fn ran past its ttl with the lock extended")
}

// waitWoken has waiter (another process's Redlock) wait for key, which
// holder holds, with a retry delay of delay, and releases it once subscribed
// says the waiter listens; it returns whether the waiter was woken by the
// release's announcement, and how long it waited.
func waitWoken(t *testing.T, holder, waiter *redlock.Redlock, keys []string, delay time.Duration, subscribed func() bool) (bool, time.Duration) {
	ctx := context.Background()
	l, err := holder.Acquire(ctx, keys, time.Minute)
	require.NoError(t, err)
	var woken atomic.Bool
	var waited atomic.Int64
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, keys, time.Minute, redlock.WithRetryCount(-1), redlock.WithRetryDelay(delay), redlock.WithRetryJitter(0),
			redlock.WithObserver(&redlock.Observer{Wait: func(w redlock.WaitInfo) { woken.Store(w.Woken); waited.Store(int64(w.Waited)) }}))
		if err == nil {
			_, err = l.Release(ctx)
		}
		got <- err
	}()
	if !assert.Eventually(t, func() bool { return redlock.QueuedWaiters(waiter, keys) == 1 && subscribed() },
		10*time.Second, time.Millisecond, "the waiter queued and listening") {
		t.Fatalf("queued waiters %d, subscribed %v, the waiter's error so far: %v", redlock.QueuedWaiters(waiter, keys), subscribed(), func() error {
			select {
			case err := <-got:
				return err
			default:
				return nil
			}
		}())
	}
	_, err = l.Release(ctx)
	require.NoError(t, err)
	select {
	case err := <-got:
		require.NoError(t, err, "the waiter's Acquire and Release")
	case <-time.After(delay + 20*time.Second):
		t.Fatal("the waiter never got the lock")
	}
	return woken.Load(), time.Duration(waited.Load())
}

func checkWake(t *testing.T, _ support) {
	f := newNodes(t, 3)
	waiter, _ := ownRedlock(t, f, viaF)
	// The waiter's own subscriptions: the holder's Redlock listens on the
	// nodes too (for its lock's force release).
	woken, _ := waitWoken(t, f.rl, waiter, []string{"compat:wake"}, time.Hour, func() bool {
		return redlock.Listening(waiter) == len(f.Peek)
	})
	assert.True(t, woken, "woken by the release, not the hour's delay")
}

func checkCluster(t *testing.T, _ support) {
	rl, cc := clusterRedlock(t, redistest.StartCluster(t, 3), nil)
	ctx := context.Background()
	keys := []string{"{compat}:1", "{compat}:2"}
	l, err := rl.Acquire(ctx, keys, 10*time.Second, redlock.WithFencing(true))
	require.NoError(t, err)
	for _, k := range keys {
		assert.Equal(t, l.Value(), cc.Get(ctx, k).Val())
	}
	l, err = l.Extend(ctx, 20*time.Second)
	require.NoError(t, err)
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// On a Redis 6.2 Cluster (no SSUBSCRIBE) a waiter is not woken by the
// release: it waits its retry delay, and the waker does not ask the
// Cluster again.
func checkClusterWake(t *testing.T, want support) {
	nodes := redistest.StartCluster(t, 3)
	holder, cc := clusterRedlock(t, nodes, nil)
	waiter, _ := clusterRedlock(t, nodes, nil)
	keys := []string{"{compat}:wake"}
	ctx := context.Background()
	delay := time.Hour
	subscribed := func() bool {
		ch := redlock.ShardedChannel(keys[0])
		m, err := cc.MasterForKey(ctx, ch)
		return err == nil && m.PubSubShardNumSub(ctx, ch).Val()[ch] >= 1
	}
	if want == byRetryDelay {
		delay = time.Second
		subscribed = func() bool { return true }
	}
	woken, waited := waitWoken(t, holder, waiter, keys, delay, subscribed)
	switch want {
	case works:
		assert.True(t, woken, "woken by the release, not the hour's delay")
	case byRetryDelay:
		assert.False(t, woken, "no sharded pub/sub: nothing to wake the waiter")
		t.Logf("a waiter with a retry delay of %v waited %v after the release's attempt", delay, waited)
	}

	// What a waiter with the default retry delay (200ms, jitter 100ms)
	// waits from a release to its lock: a figure, not a bound.
	const rounds = 20
	var gaps []time.Duration
	for range rounds {
		l, err := holder.Acquire(ctx, keys, time.Minute)
		require.NoError(t, err)
		got := make(chan time.Time, 1)
		go func() {
			l, err := waiter.Acquire(ctx, keys, time.Minute, redlock.WithRetryCount(-1))
			at := time.Now()
			if assert.NoError(t, err) {
				_, _ = l.Release(ctx)
			}
			got <- at
		}()
		require.Eventually(t, func() bool { return redlock.QueuedWaiters(waiter, keys) == 1 && subscribed() }, 10*time.Second, time.Millisecond)
		released := time.Now()
		_, err = l.Release(ctx)
		require.NoError(t, err)
		gaps = append(gaps, (<-got).Sub(released))
	}
	t.Logf("from a release to the waiter's lock, default retry delay, %d rounds: median %v, slowest %v (%s)",
		rounds, percentile(gaps, 0.5).Round(time.Millisecond), percentile(gaps, 1).Round(time.Millisecond), want)
}

func checkSentinel(t *testing.T, _ support) {
	g := redistest.StartSentinel(t, 1, 3)
	f := redistest.New(t, redistest.Setup{Nodes: 2}) // the clients of two plain nodes
	rl, err := redlock.New(append(f.Clients, g.Client()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	ctx := context.Background()
	l, err := rl.Acquire(ctx, []string{"compat:sentinel"}, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return g.Client().Get(ctx, "compat:sentinel").Val() == l.Value() },
		5*time.Second, time.Millisecond, "the Sentinel group's primary holds the lock")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// replicated returns a Redlock over one primary with one replica (a node
// of its own quorum), the primary's client and the replica's.
func replicated(t *testing.T, nodeTimeout time.Duration) (rl *redlock.Redlock, primary, replica *redis.Client) {
	primaries, reps := redistest.StartWithReplicas(t, 1, 1)
	f := newFixture(t, redistest.Setup{On: primaries}, redlock.WithNodeTimeout(nodeTimeout))
	return f.rl, f.Peek[0], reps[0][0].Client()
}

func checkWait(t *testing.T, _ support) {
	rl, _, replica := replicated(t, 500*time.Millisecond)
	ctx := context.Background()
	l, err := rl.Acquire(ctx, []string{"compat:wait"}, 10*time.Second, redlock.WithReplicaAck(1, 100*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, []int{1}, l.Attempts()[len(l.Attempts())-1].ReplicaAcks, "the replica acknowledged the write")
	assert.Equal(t, l.Value(), replica.Get(ctx, "compat:wait").Val(), "the replica has the lock")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

func checkWaitAOF(t *testing.T, want support) {
	rl, primary, replica := replicated(t, 3*time.Second)
	ctx := context.Background()
	require.NoError(t, replica.ConfigSet(ctx, "appendfsync", "always").Err())
	require.NoError(t, replica.ConfigSet(ctx, "appendonly", "yes").Err())
	if want == works {
		// The replica counts once its first rewrite is done.
		require.Eventually(t, func() bool {
			r, err := primary.Do(ctx, "WAITAOF", 0, 1, 100).Slice()
			return err == nil && len(r) == 2 && r[1] == int64(1)
		}, 10*time.Second, 10*time.Millisecond, "the replica's append-only file is on")
	}
	// A replica can report a write in its file up to a second late
	// (RELIABILITY.md, "Servers"): the wait is 1.2s.
	l, err := rl.Acquire(ctx, []string{"compat:aof"}, 10*time.Second, redlock.WithAOFAck(false, 1, 1200*time.Millisecond))
	if want == refused {
		require.Error(t, err)
		t.Log(err)
		assert.Contains(t, err.Error(), "the node ("+redistest.Version(t).String()+") lacks WAITAOF, which WithAOFAck needs")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, []int{1}, l.Attempts()[len(l.Attempts())-1].ReplicaAcks, "the replica's append-only file has the write")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

func checkElection(t *testing.T, _ support) {
	f := newNodes(t, 3)
	ctx := context.Background()
	e := f.rl.Election("compat")
	term, err := e.Campaign(ctx, "first", 10*time.Second)
	require.NoError(t, err)
	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "first", leader.ID)
	require.NoError(t, term.Resign(ctx))
	next, err := e.Campaign(ctx, "second", 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, next.Number(), term.Number(), "terms are fenced")
	require.NoError(t, next.Resign(ctx))
}

func checkPermits(t *testing.T, _ support) {
	f := newNodes(t, 3)
	ctx := context.Background()
	two := redlock.WithPermits(2)
	a, err := f.rl.Acquire(ctx, []string{"compat:sem"}, 10*time.Second, two)
	require.NoError(t, err)
	b, err := f.rl.Acquire(ctx, []string{"compat:sem"}, 10*time.Second, two)
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"compat:sem"}, 10*time.Second, two, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "at most 2 holders")
	for _, l := range []*redlock.Lock{a, b} {
		_, err = l.Release(ctx)
		require.NoError(t, err)
	}
	shared := redlock.WithShared(true)
	r1, err := f.rl.Acquire(ctx, []string{"compat:rw"}, 10*time.Second, shared)
	require.NoError(t, err)
	r2, err := f.rl.Acquire(ctx, []string{"compat:rw"}, 10*time.Second, shared)
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"compat:rw"}, 10*time.Second, redlock.WithRetryCount(0))
	require.ErrorIs(t, err, redlock.ErrResourceLocked, "readers exclude the writer")
	for _, l := range []*redlock.Lock{r1, r2} {
		_, err = l.Release(ctx)
		require.NoError(t, err)
	}
}

func checkFair(t *testing.T, _ support) {
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "compat:fair"
	l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
	require.NoError(t, err)
	settled(t, f, key, l.Value()) // on every node before a waiter comes: the call returned at a quorum
	const n = 2
	order := make(chan int, n)
	locks := make(chan *redlock.Lock, n)
	var wg sync.WaitGroup
	for i := range n {
		other, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
		spawn(&wg, func() {
			got, err := other.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			if assert.NoError(t, err) {
				order <- i
				locks <- got
			}
		})
		queuedOnNodes(t, f, key, int64(i+1))
	}
	for i := range n {
		_, err := l.Release(ctx)
		require.NoError(t, err)
		select {
		case first := <-order:
			assert.Equal(t, i, first, "first come, first served")
			l = <-locks
		case <-time.After(20 * time.Second):
			t.Fatal("the head of the queue was not handed the lock")
		}
	}
	_, err = l.Release(ctx)
	require.NoError(t, err)
	wg.Wait()
}
