package redlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// clusterRedlock returns a Redlock whose one node is a ClusterClient of its
// own over the Cluster nodes; both are closed at the test's end.
func clusterRedlock(t *testing.T, nodes []*redistest.Node, co *redis.ClusterOptions, opts ...redlock.Option) (*redlock.Redlock, *redis.ClusterClient) {
	t.Helper()
	f := newFixture(t, redistest.Setup{Cluster: true, On: nodes, ClusterClient: co}, opts...)
	return f.rl, f.Cluster
}

// A Redis Cluster behind one redis.ClusterClient is one node of the quorum.
// Multi-resource locks need one hash slot (a hash tag); across slots the
// node answers CROSSSLOT and votes against. Waiting works there too: the
// release script's announcement reaches a waiter in another Redlock.
func TestClusterClientAsOneNode(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	rl, cc := clusterRedlock(t, nodes, nil)
	ctx := context.Background()

	keys := []string{"{orders}:1", "{orders}:2"}
	lock, err := rl.Acquire(ctx, keys, time.Minute)
	require.NoError(t, err, "Acquire of hash-tagged resources on a Cluster")
	for _, k := range keys {
		assert.Equal(t, lock.Value(), cc.Get(ctx, k).Val(), "GET %s", k)
	}
	lock, err = lock.Extend(ctx, 2*time.Minute)
	require.NoError(t, err, "Extend on a Cluster")
	assert.Greater(t, cc.PTTL(ctx, keys[0]).Val(), time.Minute)

	// Across slots: the node refuses the script; no contention is claimed.
	_, err = rl.Acquire(ctx, []string{"a", "b"}, time.Minute, redlock.WithRetryCount(0))
	require.Error(t, err, "Acquire across hash slots")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	assert.True(t, strings.Contains(err.Error(), "CROSSSLOT"), "the node's answer is in the error: %v", err)

	// A waiter in another Redlock is woken by the release.
	redistest.ByDesign(t, 7, 0, "sharded pub/sub (SSUBSCRIBE)")
	other, _ := clusterRedlock(t, nodes, nil)
	got := make(chan error, 1)
	var at time.Time
	var woken atomic.Bool
	go func() {
		l, err := other.Acquire(ctx, keys, time.Minute, redlock.WithRetryCount(-1), redlock.WithRetryDelay(10*time.Second), redlock.WithRetryJitter(0),
			redlock.WithObserver(&redlock.Observer{Wait: func(w redlock.WaitInfo) { woken.Store(w.Woken) }}))
		at = time.Now()
		if err == nil {
			_, err = l.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { // one failed attempt, queued and subscribed
		ch := redlock.ShardedChannel(keys[0])
		m, err := cc.MasterForKey(ctx, ch)
		return redlock.QueuedWaiters(other, keys) == 1 && err == nil && m.PubSubShardNumSub(ctx, ch).Val()[ch] >= 1
	}, 10*time.Second, time.Millisecond)
	released := time.Now()
	_, err = lock.Release(ctx)
	require.NoError(t, err, "Release on a Cluster")
	select {
	case err := <-got:
		require.NoError(t, err, "the waiter's Acquire and Release")
		t.Logf("woken %v after the release", at.Sub(released))
		assert.True(t, woken.Load(), "woken by the release, not the 10s delay")
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
}

// On a Cluster, releases are announced with sharded pub/sub, on a channel
// in each resource's own slot: waiters for resources on different shards are
// woken within milliseconds, nothing goes out on the classic channel (which
// a Cluster copies to every node), and each resource's subscription ends
// when its last waiter leaves.
func TestClusterShardedWake(t *testing.T) {
	t.Parallel()
	redistest.ByDesign(t, 7, 0, "sharded pub/sub (SSUBSCRIBE)")
	nodes := redistest.StartCluster(t, 3)
	ctx := context.Background()
	holder, cc := clusterRedlock(t, nodes, nil)
	waiter, _ := clusterRedlock(t, nodes, nil)

	// Anyone listening on the classic channel, on any node, hears nothing.
	var classic []*redis.PubSub
	for _, nd := range nodes {
		ps := nd.Client().Subscribe(ctx, redlock.ReleasedChannel)
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ps.Close() })
		classic = append(classic, ps)
	}

	// Resources on different shards, each with its own channel.
	keys := []string{"alpha", "beta", "gamma"}
	owner := map[string]string{}
	for _, k := range keys {
		m, err := cc.MasterForKey(ctx, k)
		require.NoError(t, err)
		owner[m.Options().Addr] = k
	}
	require.GreaterOrEqual(t, len(owner), 2, "the resources are on different shards")
	subscribers := func(k string) int64 {
		ch := redlock.ReleasedChannel + ":{" + k + "}"
		m, err := cc.MasterForKey(ctx, ch)
		require.NoError(t, err)
		return m.PubSubShardNumSub(ctx, ch).Val()[ch]
	}

	// A key with a '}' and no hash tag is announced on its slot's channel.
	keys = append(keys, "odd}key")
	var held []*redlock.Lock
	for _, k := range keys {
		l, err := holder.Acquire(ctx, []string{k}, time.Minute)
		require.NoError(t, err)
		held = append(held, l)
	}
	type woken struct {
		key string
		at  time.Time
		err error
	}
	got := make(chan woken, len(keys))
	for _, k := range keys {
		go func() {
			l, err := waiter.Acquire(ctx, []string{k}, time.Minute,
				redlock.WithRetryCount(-1), redlock.WithRetryDelay(10*time.Second), redlock.WithRetryJitter(0))
			at := time.Now()
			if err == nil {
				_, err = l.Release(ctx)
			}
			got <- woken{k, at, err}
		}()
	}
	for _, k := range keys[:3] {
		require.Eventually(t, func() bool { return subscribers(k) == 1 }, 5*time.Second, 10*time.Millisecond,
			"one sharded subscription for %s on its shard", k)
	}
	released := time.Now()
	for _, l := range held {
		_, err := l.Release(ctx)
		require.NoError(t, err)
	}
	for range keys {
		select {
		case w := <-got:
			require.NoError(t, w.err, "%s: the waiter's Acquire and Release", w.key)
			t.Logf("%s: woken %v after the releases", w.key, w.at.Sub(released))
			assert.Less(t, w.at.Sub(released), 2*time.Second, "%s: woken by the release, not the 10s delay", w.key)
		case <-time.After(15 * time.Second):
			t.Fatal("a waiter never got its lock")
		}
	}
	for _, k := range keys[:3] {
		assert.Eventually(t, func() bool { return subscribers(k) == 0 }, 5*time.Second, 10*time.Millisecond,
			"the subscription for %s ends with its last waiter", k)
	}
	for i, ps := range classic {
		msg, err := ps.ReceiveTimeout(ctx, 100*time.Millisecond)
		assert.Error(t, err, "node %d: nothing on the classic channel, got %v", i, msg)
	}
}

// Fenced locks on a Cluster: each resource's counter is in its slot, so the
// scripts that take a resource and its counter together are accepted, for
// hash-tagged resources, plain ones and ones with odd braces alike.
func TestClusterFencedLocks(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	rl, _ := clusterRedlock(t, nodes, nil)
	ctx := context.Background()
	for _, res := range [][]string{{"{orders}:1", "{orders}:2"}, {"plain"}, {"a}b"}, {"{}x}"}, {"x{y"}} {
		for want := uint64(1); want <= 3; want++ {
			l, err := rl.Acquire(ctx, res, time.Minute, redlock.WithFencing(true))
			require.NoError(t, err, "fenced Acquire(%q) on a Cluster", res)
			assert.Equal(t, want, l.Token(), "%q", res)
			l, err = l.Extend(ctx, time.Minute)
			require.NoError(t, err)
			_, err = l.Release(ctx)
			require.NoError(t, err)
		}
	}
}
