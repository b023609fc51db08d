package redlock_test

import (
	"context"
	"errors"
	"fmt"
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

// A FailoverClient (a real Sentinel group: a primary, two replicas, three
// sentinels) as one member of a 3-node quorum: locks work before, during and
// after forced failovers, and no call waits past its node timeout.
func TestSentinelNodeInAQuorum(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t, 2, 3)
	plain := redistest.Start(t, 2)
	const nodeTimeout = 200 * time.Millisecond
	f := redistest.New(t, redistest.Setup{On: plain}) // the clients of the two plain nodes
	rl, err := redlock.New(append(f.Clients, g.Client()), redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetryCount(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rl.Close() })
	warm(t, rl)

	var (
		calls, failed atomic.Int64
		slowest       atomic.Int64
		stop          = make(chan struct{})
		wg            sync.WaitGroup
	)
	for w := range 2 {
		spawn(&wg, func() {
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				l, err := rl.Acquire(ctx, []string{fmt.Sprintf("sentinel:%d:%d", w, i)}, 5*time.Second)
				if err == nil {
					_, err = l.Release(ctx)
				}
				took := time.Since(start)
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					t.Logf("call failed: %v", err)
				}
				for {
					s := slowest.Load()
					if int64(took) <= s || slowest.CompareAndSwap(s, int64(took)) {
						break
					}
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	for range 2 {
		from, to := g.Failover()
		t.Logf("failover: node %d -> node %d", from, to)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d acquire+release pairs during two failovers: %d failed, slowest %v", calls.Load(), failed.Load(), time.Duration(slowest.Load()))
	assert.Zero(t, failed.Load(), "two healthy nodes make a quorum whatever the Sentinel node does")
	assert.Less(t, time.Duration(slowest.Load()), 2*nodeTimeout+time.Second, "no call waits on the switching node past its node timeout")

	// After the failovers, the Sentinel node votes for again.
	assert.Eventually(t, func() bool {
		l, err := rl.Acquire(context.Background(), []string{"sentinel:after"}, time.Second)
		if err != nil {
			return false
		}
		_, _ = l.Release(context.Background())
		for _, n := range l.Attempts()[0].VotesFor {
			if n == 2 {
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the Sentinel node votes for after the failovers")
}

// The failure that replica acknowledgement prevents, measured on a real
// Sentinel group whose replication lags (500ms): acquire a lock on the
// group (one node: its own quorum), fail over at once, and try to acquire it
// from another client. Without WithReplicaAck the second client often gets
// it: the write had not reached the replica that was promoted. With it,
// never.
func TestReplicaAckKeepsLocksThroughFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []redlock.Option
	}{{"without", nil}, {"WithReplicaAck(2, 1s)", []redlock.Option{redlock.WithReplicaAck(2, time.Second)}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a group of its own each: 8 failovers take half a minute
			g := redistest.StartSentinel(t, 2, 3)
			g.SetReplicationLag(500 * time.Millisecond)
			failoverRounds(t, func() redis.UniversalClient { return g.Client() }, func() { g.Failover() }, "failover", 2, tc.opts...)
		})
	}
}

// failoverRounds acquires a lock on the one node client makes, fails it
// over at once, and tries to acquire the lock from another client, 8
// rounds. With opts (WithReplicaAck), the other client never gets it and
// every lock was acknowledged by replicas; without, it gets it at least
// once (or the test shows nothing).
func failoverRounds(t *testing.T, client func() redis.UniversalClient, failover func(), prefix string, replicas int, opts ...redlock.Option) {
	const rounds = 8
	holder, err := redlock.New([]redis.UniversalClient{client()}, append([]redlock.Option{redlock.WithNodeTimeout(3 * time.Second)}, opts...)...)
	require.NoError(t, err)
	defer holder.Close()
	other, err := redlock.New([]redis.UniversalClient{client()}, redlock.WithNodeTimeout(time.Second), redlock.WithRetryCount(0))
	require.NoError(t, err)
	defer other.Close()
	got := 0
	var acks []int
	for i := range rounds {
		key := fmt.Sprintf("%s:%d", prefix, i)
		l, err := holder.Acquire(context.Background(), []string{key}, time.Minute, redlock.WithRetryCount(3))
		require.NoError(t, err, "round %d", i)
		if ra := l.Attempts()[len(l.Attempts())-1].ReplicaAcks; ra != nil {
			acks = append(acks, ra[0])
		}
		failover()
		// The second client, once the node has a new primary.
		var l2 *redlock.Lock
		for range 20 {
			l2, err = other.Acquire(context.Background(), []string{key}, time.Minute)
			if err == nil || errors.Is(err, redlock.ErrResourceLocked) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the client still finds the old primary
		}
		if l2 != nil {
			got++
		}
	}
	t.Logf("%d rounds of acquire, failover, acquire from another client (replication lag 500ms): the second client got the lock "+
		"%d times (replicas that acknowledged each lock: %v)", rounds, got, acks)
	if len(opts) == 0 {
		assert.Positive(t, got, "without WithReplicaAck, the lag loses locks (or this test shows nothing)")
		return
	}
	assert.Zero(t, got, "locks lost through a failover with WithReplicaAck")
	require.Len(t, acks, rounds)
	for _, a := range acks {
		assert.Equal(t, replicas, a)
	}
}

// A node whose write does not reach the replicas asked for votes against,
// saying so, and the failed attempt's write is cleaned up; a node without
// WAITAOF (Redis < 7.2) refuses WithAOFAck clearly.
func TestReplicaAckFallsShort(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 1, redlock.WithNodeTimeout(500*time.Millisecond)) // no replicas at all
	_, err := f.rl.Acquire(context.Background(), []string{"short"}, time.Second,
		redlock.WithReplicaAck(1, 40*time.Millisecond), redlock.WithRetryCount(0))
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "written, but acknowledged by 0 of the 1 replicas asked for within 40ms (WithReplicaAck)")
	var ee *redlock.ExecutionError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, []int{0}, ee.Attempts[0].ReplicaAcks)
	f.gone(t, 0, "short")

	_, err = f.rl.Acquire(context.Background(), []string{"aof"}, time.Second, redlock.WithAOFAck(false, 1, 40*time.Millisecond))
	require.Error(t, err)
	t.Log(err)
	if server := redistest.Version(t); !server.AtLeast(7, 2) {
		// The error names the server's version and what it needs:
		// Redis 6.2's reply quotes the command `WAITAOF`, 7.0's 'WAITAOF'.
		assert.Contains(t, err.Error(), "the node ("+server.String()+") lacks WAITAOF, which WithAOFAck needs and Redis 7.2 and Valkey 7.2 added")
		assert.Contains(t, err.Error(), "retrying cannot fix")
		assert.NotContains(t, err.Error(), "Lua", "an unknown WAITAOF is not a server without scripts")
	} else {
		assert.Contains(t, err.Error(), "(WithAOFAck)")
	}
	f.gone(t, 0, "aof")

	// Option checks.
	for _, o := range []redlock.Option{redlock.WithReplicaAck(-1, time.Millisecond), redlock.WithReplicaAck(1, 0),
		redlock.WithReplicaAck(1, 250*time.Millisecond)} {
		_, err := f.rl.Acquire(context.Background(), []string{"x"}, time.Second, o)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "WithReplicaAck")
	}
}

// A node with WAIT (or, on a server that has it, WAITAOF) renamed away is
// refused, saying so: before, it read "the node does not run Lua scripts",
// and a WAITAOF renamed on Redis 7.2 was told to upgrade to 7.2.
func TestAcknowledgementCommandDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		command string
		option  redlock.Option
		name    string
	}{
		{"WAIT", redlock.WithReplicaAck(1, 40*time.Millisecond), "WithReplicaAck"},
		{"WAITAOF", redlock.WithAOFAck(false, 1, 40*time.Millisecond), "WithAOFAck"},
	}
	for _, tc := range cases {
		t.Run(tc.command, func(t *testing.T) {
			server := redistest.Version(t)
			if tc.command == "WAITAOF" && !server.AtLeast(7, 2) {
				t.Skipf("%s has no WAITAOF to rename (TestReplicaAckFallsShort checks its refusal)", server)
			}
			nd := redistest.StartNodeWith(t, "--rename-command", tc.command, "")
			f := newFixture(t, redistest.Setup{On: []*redistest.Node{nd}}, redlock.WithNodeTimeout(500*time.Millisecond))
			_, err := f.rl.Acquire(ctx, []string{"disabled"}, time.Second, tc.option)
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), "the node ("+server.String()+") has "+tc.command+" renamed or disabled (rename-command), which "+tc.name+" needs")
			assert.Contains(t, err.Error(), "retrying cannot fix")
			assert.NotContains(t, err.Error(), "Lua")
			var ee *redlock.ExecutionError
			require.ErrorAs(t, err, &ee)
			assert.Len(t, ee.Attempts, 1, "ended at once")
			f.gone(t, 0, "disabled")
		})
	}
}

// The same on a Redis Cluster (3 primaries with a replica each, replication
// lagging 500ms): acquire a lock on the Cluster (one node of its own
// quorum), fail its slot's primary over at once (CLUSTER FAILOVER TAKEOVER
// on its replica), and try to acquire the lock from another client.
func TestReplicaAckKeepsLocksThroughClusterFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []redlock.Option
	}{{"without", nil}, {"WithReplicaAck(1, 1s)", []redlock.Option{redlock.WithReplicaAck(1, time.Second)}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a Cluster of its own each
			c := redistest.StartReplicatedCluster(t, 3)
			c.SetReplicationLag(500 * time.Millisecond)
			const slotKey = "{failover}"
			slot := int(c.Client().ClusterKeySlot(context.Background(), slotKey).Val())
			failoverRounds(t, func() redis.UniversalClient { return c.Client() }, func() { c.FailoverSlot(slot) }, slotKey, 1, tc.opts...)
		})
	}
}

// Acquire, the fencing write-back and Extend all wait for the replicas; a
// release does not.
func TestReplicaAckOnEveryWrite(t *testing.T) {
	t.Parallel()
	primaries, _ := redistest.StartWithReplicas(t, 3, 1)
	f := newFixture(t, redistest.Setup{On: primaries}, redlock.WithNodeTimeout(500*time.Millisecond),
		redlock.WithReplicaAck(1, 100*time.Millisecond))
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"acked"}, 10*time.Second, redlock.WithFencing(true))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), l.Token())
	// The attempt's statistics are the write-back's: the nodes that voted
	// for had a replica take the token.
	st := l.Attempts()[0]
	for _, n := range st.VotesFor {
		assert.Equal(t, 1, st.ReplicaAcks[n], "node %d's write-back reached its replica", n)
	}
	l, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	st = l.Attempts()[0]
	for _, n := range st.VotesFor {
		assert.Equal(t, 1, st.ReplicaAcks[n], "node %d's extend reached its replica", n)
	}
	res, err := l.Release(ctx)
	require.NoError(t, err)
	assert.Nil(t, res.Attempts[0].ReplicaAcks, "a release is not waited for")
}

// A lock that waits for replicas does not hold up the others: its calls
// take lanes of their own, so a plain Acquire or Release never waits behind
// a WAIT (with the replica stopped, each WAIT lasts its whole timeout).
func TestReplicaAckDoesNotHoldUpPlainCalls(t *testing.T) {
	t.Parallel()
	primaries, replicas := redistest.StartWithReplicas(t, 3, 1)
	f := newFixture(t, redistest.Setup{On: primaries}, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := context.Background()
	// Stop every replica: every acked acquire waits its 200ms, and fails.
	for _, r := range replicas {
		r[0].Pause()
		t.Cleanup(r[0].Resume)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	spawn(&wg, func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("acked%d", i)}, time.Second, redlock.WithReplicaAck(1, 200*time.Millisecond), redlock.WithRetryCount(0))
			assert.Error(t, err, "no replica acknowledges")
		}
	})
	time.Sleep(50 * time.Millisecond)
	failed, slowest := 0, time.Duration(0)
	for i := range 30 {
		start := time.Now()
		l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("plain%d", i)}, 150*time.Millisecond, redlock.WithRetryCount(0))
		if err == nil {
			_, err = l.Release(ctx)
		}
		if err != nil {
			failed++
			t.Log(err)
		}
		slowest = max(slowest, time.Since(start))
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("30 plain acquire+release beside a loop of acked acquires (each waiting 200ms): %d failed, slowest %v", failed, slowest)
	assert.Zero(t, failed, "plain calls with a ttl of 150ms, shorter than the WAITs")
}

// A client whose ReadTimeout would cut a WAIT short is refused before
// anything is sent, naming the option to change.
func TestReplicaAckNeedsTheClientsReadTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 1, Client: &redis.Options{ReadTimeout: 100 * time.Millisecond}}, redlock.WithNodeTimeout(500*time.Millisecond))
	_, err := f.rl.Acquire(context.Background(), []string{"rt"}, time.Second, redlock.WithReplicaAck(1, 200*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "ReadTimeout")
	t.Log(err)
}
