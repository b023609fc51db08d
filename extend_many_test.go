package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// scriptCalls returns how many script calls (EVALSHA and EVAL) node c has
// run.
func scriptCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				n += v
			}
		}
	}
	return n
}

// extendAll extends every lock at once, replaces each extended one with
// its new handle, and returns their errors.
func extendAll(locks []*redlock.Lock, ttl time.Duration) []error {
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var next *redlock.Lock
			if next, errs[i] = l.Extend(context.Background(), ttl); errs[i] == nil {
				locks[i] = next
			}
		}()
	}
	wg.Wait()
	return errs
}

// Extensions due together on a node go in one script call: 200 locks
// extended at once on nodes 5ms away cost each node a few calls, not 200,
// and each lock comes out as its own Extend would have: extended; extended
// though one node had lost it (written back there, and counted against);
// or lost, where another value took two nodes.
func TestExtensionsDueTogetherGoInOneCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: redistest.NoClientTimeouts}, redlock.WithNodeTimeout(time.Second))
	warm(t, f.rl)
	ctx := context.Background()
	const n = 200
	locks := make([]*redlock.Lock, n)
	for i := range locks {
		l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}many%d", i)}, time.Minute)
		require.NoError(t, err)
		locks[i] = l
	}
	for i, l := range locks {
		key := l.Resources()[0]
		switch i % 10 {
		case 3: // node 0 lost it: written back, and counted against
			require.NoError(t, f.Peek[0].Del(ctx, key).Err())
		case 7: // taken by another on two nodes: lost
			require.NoError(t, f.Peek[1].Set(ctx, key, "other", time.Minute).Err())
			require.NoError(t, f.Peek[2].Set(ctx, key, "other", time.Minute).Err())
		}
	}
	for _, p := range f.Proxies {
		p.SetLatency(5*time.Millisecond, 0)
	}
	before := make([]int, 3)
	for i, p := range f.Peek {
		before[i] = scriptCalls(t, p)
	}
	errs := extendAll(locks, 2*time.Minute)
	for i, p := range f.Peek {
		calls := scriptCalls(t, p) - before[i]
		t.Logf("node %d: %d script calls for %d extensions", i, calls, n)
		assert.Less(t, calls, n/4, "node %d: extensions due together go in one call", i)
	}
	for i, l := range locks {
		key := l.Resources()[0]
		switch i % 10 {
		case 7:
			assert.ErrorIs(t, errs[i], redlock.ErrLockExpired, "lock %d, taken by another on 2 of 3 nodes", i)
			assert.Equal(t, "other", f.Peek[1].Get(ctx, key).Val())
		default:
			require.NoError(t, errs[i], "lock %d", i)
			for j, p := range f.Peek { // Extend returns at a quorum: the last node's answer may be on its way
				assert.Eventually(t, func() bool {
					return p.Get(ctx, key).Val() == l.Value() && p.PTTL(ctx, key).Val() > time.Minute+30*time.Second
				}, 5*time.Second, time.Millisecond, "lock %d extended on node %d", i, j)
			}
		}
	}
}

// A node whose ACL user may run the lock's scripts but not the one that
// runs many extensions at once (MGET, TYPE) still extends every lock: the
// refused call's extensions go again one by one, and so do the next ones.
func TestExtensionsGoOneByOneWhereTheManyCallIsRefused(t *testing.T) {
	t.Parallel()
	user := &redis.Options{Username: "nomget", Password: "pw"}
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: user}, redlock.WithNodeTimeout(time.Second))
	ctx := context.Background()
	for _, p := range f.Peek {
		require.NoError(t, p.Do(ctx, "ACL", "SETUSER", "nomget", "on", ">pw", "~*", "&*", "+@all", "-mget", "-type").Err())
	}
	warm(t, f.rl)
	for _, p := range f.Proxies {
		p.SetLatency(5*time.Millisecond, 0)
	}
	for round := range 3 {
		locks := make([]*redlock.Lock, 50)
		for i := range locks {
			l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}acl%d-%d", round, i)}, time.Minute)
			require.NoError(t, err)
			locks[i] = l
		}
		for i, err := range extendAll(locks, 2*time.Minute) {
			require.NoError(t, err, "round %d, lock %d", round, i)
			for j, p := range f.Peek {
				assert.Eventually(t, func() bool { return p.PTTL(ctx, locks[i].Resources()[0]).Val() > time.Minute+30*time.Second },
					5*time.Second, time.Millisecond, "round %d: lock %d extended on node %d", round, i, j)
			}
		}
	}
	denied, err := f.Peek[0].Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	assert.NotEmpty(t, denied, "node 0 refused a call of many extensions (MGET)")
}

// A node that lost the scripts (SCRIPT FLUSH, a restart) answers NOSCRIPT
// to the call that runs many extensions: each goes again alone, with its
// script, and the next call of many carries its own.
func TestExtensionsAfterScriptFlush(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: redistest.NoClientTimeouts}, redlock.WithNodeTimeout(time.Second))
	warm(t, f.rl)
	ctx := context.Background()
	locks := make([]*redlock.Lock, 60)
	for i := range locks {
		l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}flush%d", i)}, time.Minute)
		require.NoError(t, err)
		locks[i] = l
	}
	for _, p := range f.Proxies {
		p.SetLatency(5*time.Millisecond, 0)
	}
	for round := range 3 {
		for _, p := range f.Peek {
			require.NoError(t, p.ScriptFlush(ctx).Err())
		}
		for i, err := range extendAll(locks, time.Duration(2+round)*time.Minute) {
			require.NoError(t, err, "round %d, lock %d", round, i)
		}
		for i, l := range locks {
			for j, p := range f.Peek {
				assert.Eventually(t, func() bool {
					return p.PTTL(ctx, l.Resources()[0]).Val() > time.Duration(1+round)*time.Minute+30*time.Second
				},
					5*time.Second, time.Millisecond, "round %d: lock %d on node %d", round, i, j)
			}
		}
	}
}

// On a Cluster, extensions due together go in one call per hash slot: 300
// locks over 30 slots, extended at once, are all extended (a call of many
// across slots would be refused with CROSSSLOT).
func TestExtensionsDueTogetherOnACluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	rl, cc := clusterRedlock(t, nodes, nil)
	ctx := context.Background()
	locks := make([]*redlock.Lock, 300)
	for i := range locks {
		// 30 hash tags: 10 locks in each slot, and each lock a key of its own
		l, err := rl.Acquire(ctx, []string{fmt.Sprintf("{c%d}:%d", i%30, i)}, time.Minute)
		require.NoError(t, err)
		locks[i] = l
	}
	calls := func() int {
		n := 0
		for _, nd := range nodes {
			n += scriptCalls(t, nd.Client())
		}
		return n
	}
	before := calls()
	for i, err := range extendAll(locks, 2*time.Minute) {
		require.NoError(t, err, "lock %d", i)
		assert.Greater(t, cc.PTTL(ctx, locks[i].Resources()[0]).Val(), time.Minute+30*time.Second, "lock %d", i)
	}
	t.Logf("%d script calls on the shards for %d extensions", calls()-before, len(locks))
	for i := range 20 { // two locks of a slot in one call: neither is disturbed by the other
		l2, err := rl.Acquire(ctx, []string{fmt.Sprintf("{c%d}:other%d", i, i)}, time.Minute)
		require.NoError(t, err)
		_, err = l2.Release(ctx)
		require.NoError(t, err)
	}
}

// A call of many that a node refuses partway (its ACL user lacks TYPE,
// which the call asks of a key it found missing, after it wrote earlier
// locks' keys) counts each lock as its own call would: a lock gone from 2
// of 3 nodes is lost (ErrLockExpired), whichever part of the call it was
// in, and the locks held everywhere are extended. (helper-19: with PEXPIRE
// refused after a write-back, locks gone from a quorum were reported
// extended; the call now writes with SET, as an extension alone does, and
// reports a refused write as that lock's own error.)
func TestManyCallRefusedPartwayCountsEachLockRight(t *testing.T) {
	t.Parallel()
	for _, denied := range []string{"-type", "-pexpire"} {
		t.Run(denied, func(t *testing.T) {
			t.Parallel()
			user := &redis.Options{Username: "partial", Password: "pw", ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1}
			f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: user}, redlock.WithNodeTimeout(2*time.Second))
			ctx := context.Background()
			for _, p := range f.Peek {
				require.NoError(t, p.Do(ctx, "ACL", "SETUSER", "partial", "on", ">pw", "~*", "&*", "+@all", denied).Err())
			}
			for round := range 3 {
				rl, _ := ownRedlock(t, f, viaF, redlock.WithNodeTimeout(2*time.Second)) // a new Redlock: its lanes merge
				warm(t, rl)
				locks := make([]*redlock.Lock, 60)
				for i := range locks {
					l, err := rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}partial%d-%d", round, i)}, time.Minute)
					require.NoError(t, err)
					locks[i] = l
				}
				for i, l := range locks {
					// Acquire returns at a quorum: the third node's write may
					// land after a delete here, and hold the lock on 2 of 3
					// (go1.24 stage of a loaded CI run, locks 54, 56 and 58).
					settled(t, f, l.Resources()[0], l.Value())
					if i%2 == 0 { // gone from nodes 0 and 1: lost
						require.NoError(t, f.Peek[0].Del(ctx, l.Resources()[0]).Err())
						require.NoError(t, f.Peek[1].Del(ctx, l.Resources()[0]).Err())
					}
				}
				for _, p := range f.Proxies {
					p.SetLatency(5*time.Millisecond, 0)
				}
				errs := extendAll(locks, 2*time.Minute)
				for _, p := range f.Proxies {
					p.SetLatency(0, 0)
				}
				for i, err := range errs {
					if i%2 == 0 {
						assert.ErrorIs(t, err, redlock.ErrLockExpired, "round %d: lock %d, gone from 2 of 3 nodes", round, i)
					} else {
						assert.NoError(t, err, "round %d: lock %d, held everywhere", round, i)
					}
				}
			}
		})
	}
}

// A transient error of a call of many (BUSY: another client's long script
// on the node) is each lock's own error, as for a call alone: the locks are
// extended on the other nodes, and once the node answers again their
// extensions go together again. (helper-19: any error turned merging off
// for the connection's life; then, under load, 1 of 5 runs: a BUSY answer
// to the first call of many, sent with its script, marked the script
// cached, and the next call of many, by hash, met NOSCRIPT and sent its
// 100 extensions again one by one.)
func TestManyCallAfterABusyNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: redistest.NoClientTimeouts}, redlock.WithNodeTimeout(time.Second))
	warm(t, f.rl)
	ctx := context.Background()
	require.NoError(t, f.Peek[0].ConfigSet(ctx, "busy-reply-threshold", "50").Err())
	locks := make([]*redlock.Lock, 100)
	for i := range locks {
		l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}busy%d", i)}, time.Minute)
		require.NoError(t, err)
		locks[i] = l
	}
	for _, p := range f.Proxies {
		p.SetLatency(5*time.Millisecond, 0)
	}
	busy := make(chan error, 1)
	go func() {
		busy <- f.Nodes[0].Client().Eval(ctx, `local t0 = redis.call('time')
while true do local t = redis.call('time'); if (t[1]-t0[1])*1000000 + (t[2]-t0[2]) > 600000 then break end end
return 1`, nil).Err()
	}()
	require.Eventually(t, func() bool { return f.Peek[1].Ping(ctx).Err() == nil && f.Peek[0].Ping(ctx).Err() != nil }, 2*time.Second, 5*time.Millisecond,
		"node 0 answers BUSY")
	for i, err := range extendAll(locks, time.Minute) {
		require.NoError(t, err, "lock %d, while node 0 is busy", i)
	}
	require.NoError(t, <-busy)
	before := scriptCalls(t, f.Peek[0])
	for i, err := range extendAll(locks, time.Minute) {
		require.NoError(t, err, "lock %d", i)
	}
	require.Eventually(t, func() bool { return scriptCalls(t, f.Peek[0]) > before }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the last node's answers come after the quorum's
	calls := scriptCalls(t, f.Peek[0]) - before
	t.Logf("node 0 after its BUSY: %d script calls for %d extensions", calls, len(locks))
	assert.Less(t, calls, len(locks)/4, "extensions due together go together again")
}

// After a node refused a call of many (an ACL without MGET), its
// extensions go one by one for a while (a minute; 300ms in tests), then
// together again once it allows MGET: whatever the client did with its
// connections (helper-20: go-redis reused idle connections and rueidis
// reconnects on its own, so no set-up of the lane's came to end it).
func TestMergingComesBackAfterARefusal(t *testing.T) {
	t.Parallel()
	user := &redis.Options{Username: "back", Password: "pw", ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1}
	f := newFixture(t, redistest.Setup{Nodes: 3, Proxied: true, Client: user}, redlock.WithNodeTimeout(time.Second))
	ctx := context.Background()
	acl := func(rules ...string) {
		for _, p := range f.Peek {
			require.NoError(t, p.Do(ctx, append([]any{"ACL", "SETUSER", "back"}, anys(rules)...)...).Err())
		}
	}
	acl("on", ">pw", "~*", "&*", "+@all")
	warm(t, f.rl)
	locks := make([]*redlock.Lock, 100)
	for i := range locks {
		l, err := f.rl.Acquire(ctx, []string{fmt.Sprintf("{redlock}back%d", i)}, time.Minute)
		require.NoError(t, err)
		locks[i] = l
	}
	for _, p := range f.Proxies {
		p.SetLatency(5*time.Millisecond, 0)
	}
	round := func() int {
		before := scriptCalls(t, f.Peek[0])
		for i, err := range extendAll(locks, time.Minute) {
			require.NoError(t, err, "lock %d", i)
		}
		require.Eventually(t, func() bool { return scriptCalls(t, f.Peek[0]) > before }, 5*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond) // the last node's answers come after the quorum's
		return scriptCalls(t, f.Peek[0]) - before
	}
	acl("-mget")
	round() // refused, then one by one
	acl("+mget")
	assert.Greater(t, round(), len(locks)/2, "right after the refusal: one by one")
	time.Sleep(400 * time.Millisecond) // ManyRetry in tests
	round()                            // the first call of many again
	assert.Less(t, round(), len(locks)/4, "together again")
}

// anys returns ss as []any.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
