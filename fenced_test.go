package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

var fenced = redlock.WithFencing(true)

// counterOf is the name of resource's fencing counter, as the docs give it
// (for a resource without braces).
func counterOf(resource string) string { return "redlock:fence:{" + resource + "}:" + resource }

// acquireToken acquires resources fenced, releases them, and returns the
// token.
func acquireToken(t *testing.T, rl *redlock.Redlock, resources ...string) uint64 {
	t.Helper()
	ctx := context.Background()
	l, err := rl.Acquire(ctx, resources, 10*time.Second, fenced)
	require.NoError(t, err, "fenced Acquire(%q)", resources)
	_, err = l.Release(ctx)
	require.NoError(t, err)
	return l.Token()
}

// Tokens count up by one per grant on healthy nodes, across Redlocks with
// clients of their own (as separate processes would have), whether the
// grants are made one after another or by contending callers.
func TestTokensCountUpAcrossRedlocks(t *testing.T) {
	t.Parallel()
	base := newNodes(t, 3)
	rls := []*redlock.Redlock{base.rl}
	for range 3 {
		rls = append(rls, newFixture(t, redistest.Setup{On: base.Nodes}).rl)
	}
	for i := range 12 {
		assert.Equal(t, uint64(i+1), acquireToken(t, rls[i%len(rls)], "seq"), "grant %d, through Redlock %d", i+1, i%len(rls))
	}
	// The last token is on a quorum of the nodes: what a grant promises.
	// A third node's counter may lag for good: a write-back lands only
	// where the lock holds, and a node that still held the previous lock
	// (its release returns at quorum, and each Redlock has connections of
	// its own) voted against, and took no write-back.
	at := 0
	for i := range 3 {
		c, _ := strconv.ParseUint(base.Get(t, i, counterOf("seq")), 10, 64)
		assert.LessOrEqual(t, c, uint64(12), "node %d's counter", i)
		if c == 12 {
			at++
		}
	}
	assert.GreaterOrEqual(t, at, 2, "nodes whose counter is the last token, 12")

	// Contending callers: the tokens, in the order the critical sections
	// ran, are 1, 2, 3, ... with no repeat, and no gap but one per attempt
	// whose write-back was sent and that still failed (its quorum came
	// after the lock's validity: a CPU starved under -race beside other
	// suites drew one in a whole-suite run).
	const each = 15
	var (
		mu    sync.Mutex
		order []uint64
		wg    sync.WaitGroup
		late  atomic.Int64
	)
	watch := redlock.WithObserver(&redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
		if a.Op == redlock.OpAcquire && !a.Won && redlock.WriteBackSent(a.Stats) {
			late.Add(1)
		}
	}})
	for _, rl := range rls {
		spawn(&wg, func() {
			for range each {
				err := rl.Using(context.Background(), []string{"contended"}, time.Second, func(ctx context.Context) error {
					tok, ok := redlock.TokenFrom(ctx)
					if !ok {
						return errors.New("no token in fn's ctx")
					}
					mu.Lock()
					order = append(order, tok)
					mu.Unlock()
					return nil
				}, fenced, redlock.WithRetryCount(-1), watch)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.Len(t, order, each*len(rls))
	gaps := int64(0)
	for i, tok := range order {
		prev := uint64(0)
		if i > 0 {
			prev = order[i-1]
		}
		require.Greater(t, tok, prev, "critical section %d: tokens grow", i+1)
		gaps += int64(tok - prev - 1)
	}
	assert.LessOrEqual(t, gaps, late.Load(), "numbers skipped, against write-backs sent by attempts that failed (tokens %v)", order)
	if gaps > 0 {
		t.Logf("%d numbers skipped, %d failed attempts had sent their write-back", gaps, late.Load())
	}
}

// A multi-resource token is 1 + the highest counter of its resources, and is
// written back to each: [a] 1, [a] 2, [b] 1, [a b] 3, then [b] 4.
func TestMultiResourceTokens(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	for _, step := range []struct {
		res  []string
		want uint64
	}{{[]string{"a"}, 1}, {[]string{"a"}, 2}, {[]string{"b"}, 1}, {[]string{"a", "b"}, 3}, {[]string{"b"}, 4}, {[]string{"a"}, 4}} {
		assert.Equal(t, step.want, acquireToken(t, f.rl, step.res...), "token of %q", step.res)
	}
	for i := range 3 {
		f.gone(t, i, "a")
		assert.Equal(t, "4", f.Get(t, i, counterOf("a")), "node %d", i)
		assert.Equal(t, "4", f.Get(t, i, counterOf("b")), "node %d", i)
		assert.Equal(t, time.Duration(-1), f.PTTL(t, i, counterOf("a")), "counters have no expiry")
	}
}

// Extend keeps the token, through every handle, and so does Using's
// automatic extension; an unfenced lock has token 0 and no token in fn's ctx.
func TestExtendKeepsTheToken(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	acquireToken(t, f.rl, "x")
	l, err := f.rl.Acquire(ctx, []string{"x"}, time.Second, fenced)
	require.NoError(t, err)
	require.Equal(t, uint64(2), l.Token())
	for range 3 {
		l, err = l.Extend(ctx, time.Second)
		require.NoError(t, err)
		assert.Equal(t, uint64(2), l.Token(), "after Extend")
	}
	_, err = l.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), l.Token(), "after Release")

	err = f.rl.Using(ctx, []string{"x"}, 700*time.Millisecond, func(ctx context.Context) error {
		first, ok := redlock.TokenFrom(ctx)
		require.True(t, ok)
		time.Sleep(1500 * time.Millisecond) // two automatic extensions
		again, _ := redlock.TokenFrom(ctx)
		assert.Equal(t, uint64(3), first)
		assert.Equal(t, first, again)
		return nil
	}, fenced)
	require.NoError(t, err)

	plain, err := f.rl.Acquire(ctx, []string{"y"}, time.Second)
	require.NoError(t, err)
	assert.Zero(t, plain.Token(), "an unfenced lock")
	_, _ = plain.Release(ctx)
	require.NoError(t, f.rl.Using(ctx, []string{"y"}, time.Second, func(ctx context.Context) error {
		tok, ok := redlock.TokenFrom(ctx)
		assert.False(t, ok, "an unfenced Using's ctx")
		assert.Zero(t, tok)
		return nil
	}))
	_, ok := redlock.TokenFrom(ctx)
	assert.False(t, ok, "a ctx that no Using made")
	for i := range 3 {
		assert.Eventually(t, func() bool { return f.DBSize(t, i) == 1 }, 2*time.Second, 5*time.Millisecond,
			"node %d keeps x's counter only, none for the unfenced y", i)
	}
}

// Unfenced locks and failed fenced attempts leave the counters alone: the
// next fenced lock gets the next number.
func TestUnfencedLocksAndFailuresLeaveCounters(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	assert.Equal(t, uint64(1), acquireToken(t, f.rl, "u"))
	for range 5 {
		l, err := f.rl.Acquire(ctx, []string{"u"}, time.Second)
		require.NoError(t, err)
		_, err = l.Release(ctx)
		require.NoError(t, err)
	}
	// Contention: fenced attempts that fail on "held by another".
	held, err := f.rl.Acquire(ctx, []string{"u"}, 10*time.Second)
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"u"}, time.Second, fenced, redlock.WithRetryCount(3), redlock.WithRetryDelay(5*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrResourceLocked)
	for i := range 3 {
		// (The first grant's write-back may reach the third node a moment
		// after the call returned.)
		assert.Eventually(t, func() bool { return f.Get(t, i, counterOf("u")) == "1" }, 2*time.Second, 5*time.Millisecond,
			"node %d's counter after unfenced locks and failed attempts", i)
	}
	_, err = held.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), acquireToken(t, f.rl, "u"))
}

// Two quorums that share exactly one node: the first is granted while two
// of five nodes are stopped (SIGSTOP), holding the resource for another, so
// their counters stay behind; the second while two others are. The later
// token is still larger: it is read from the one node the two quorums share.
func TestTokensGrowAcrossQuorumsSharingOneNode(t *testing.T) {
	t.Parallel()
	// 2s: the five grants need every one of nodes 0-2 within the node
	// timeout, on a machine loaded by the tests beside this one.
	const nodeTimeout = 2 * time.Second
	f := newFixture(t, redistest.Setup{Nodes: 5}, redlock.WithNodeTimeout(nodeTimeout))
	warm(t, f.rl)
	ctx := context.Background()
	assert.Equal(t, uint64(1), acquireToken(t, f.rl, "q"), "all five nodes")

	// Nodes 3 and 4 are stopped while nodes 0-2 grant five locks. What of
	// those grants reaches them, and when, is not the point, nor is it
	// fixed: the first acquire waits in their sockets; a write-back queued
	// behind it in the same batch goes too; a lane still setting up its
	// connection at the stop (which its calls wait for, SetUpWait node
	// timeouts) sends its whole queue once they answer; and a granted
	// lock's write-back is sent late by design (a node that takes it
	// catches up). So q holds another's value on them first: every acquire
	// of the five finds it there whenever it runs, and no write-back (which
	// needs its lock's value) raises their counters. They are behind the
	// last grant, as nodes that missed its write-backs are.
	const another = "another holder's value"
	for i := 3; i < 5; i++ {
		f.Set(t, i, "q", another, 0)
	}
	f.Nodes[3].Pause()
	f.Nodes[4].Pause()
	var last uint64
	for i := range 5 {
		last = acquireToken(t, f.rl, "q")
		assert.Equal(t, uint64(i+2), last, "nodes 0-2 only")
	}
	for i := range 3 {
		assert.Equal(t, strconv.FormatUint(last, 10), f.Get(t, i, counterOf("q")), "node %d", i)
	}
	time.Sleep(2 * nodeTimeout) // a stop past the node timeout: the watchdogs and breakers act
	f.Nodes[3].Resume()
	f.Nodes[4].Resume()
	// Every call of the Redlock has ended (Close waits for its workers and
	// held releases): what the stopped nodes ran is final. None took q, nor
	// raised a counter: 1, or none when the first grant's write-back had
	// not reached them.
	require.NoError(t, f.rl.Close())
	for i := 3; i < 5; i++ {
		assert.Equal(t, another, f.Get(t, i, "q"), "node %d, stopped", i)
		c, _ := strconv.ParseUint(f.Get(t, i, counterOf("q")), 10, 64)
		assert.LessOrEqual(t, c, uint64(1), "node %d, stopped", i)
		require.NoError(t, f.Peek[i].Del(ctx, "q").Err())
	}

	// A Redlock of its own (its breakers know nothing of the pause), with
	// nodes 0 and 1 stopped: its quorum is nodes 2, 3 and 4, each within
	// the node timeout (as above: with 50ms, a loaded machine's node 2
	// missed the first attempt's write-back, which raised the counters of
	// nodes 3 and 4 to last+1 all the same, and the retry drew last+2).
	other := newFixture(t, redistest.Setup{On: f.Nodes}, redlock.WithNodeTimeout(nodeTimeout))
	warm(t, other.rl)
	f.Nodes[0].Pause()
	f.Nodes[1].Pause()
	l, err := other.rl.Acquire(ctx, []string{"q"}, 10*time.Second, fenced)
	require.NoError(t, err)
	f.Nodes[0].Resume()
	f.Nodes[1].Resume()
	t.Logf("first quorum nodes 0-2 took token %d; second quorum nodes %v (write-back) took token %d", last, l.Attempts()[0].VotesFor, l.Token())
	require.Len(t, l.Attempts(), 1, "granted at the first attempt: a failed one's write-back raises counters")
	assert.NotContains(t, l.Attempts()[0].VotesFor, 0)
	assert.NotContains(t, l.Attempts()[0].VotesFor, 1)
	assert.Equal(t, last+1, l.Token(), "1 + the counter of node 2, the one node both quorums share")
	_, err = l.Release(ctx)
	require.NoError(t, err)
}

// fenceStoreSrc is a protected resource that checks tokens, as a Redis
// script on a node of its own: it refuses a write whose token is below the
// highest it has seen.
const fenceStoreSrc = `
local seen = tonumber(redis.call("get", KEYS[2]) or "0")
if tonumber(ARGV[1]) < seen then return 0 end
redis.call("set", KEYS[2], ARGV[1])
redis.call("set", KEYS[1], ARGV[2])
return 1
`

// The adversarial case: a holder writes, is paused past its expiration,
// another acquires and writes, and the first comes back and writes again.
// The store refuses every such stale write.
func TestPausedHolderIsFenced(t *testing.T) {
	t.Parallel()
	lockNodes := newNodes(t, 3)
	holderA := lockNodes.rl
	holderB := newFixture(t, redistest.Setup{On: lockNodes.Nodes}).rl
	store := redistest.StartNode(t).Client()
	write := redis.NewScript(fenceStoreSrc)
	ctx := context.Background()
	put := func(token uint64, value string) bool {
		ok, err := write.Run(ctx, store, []string{"data", "data:fence"}, token, value).Int()
		require.NoError(t, err)
		return ok == 1
	}

	const rounds = 100
	const ttl = 40 * time.Millisecond
	stale, fresh := 0, 0
	for i := range rounds {
		a, err := holderA.Acquire(ctx, []string{"account"}, ttl, fenced)
		require.NoError(t, err)
		require.True(t, put(a.Token(), fmt.Sprintf("A%d", i)), "A's own write, round %d", i)
		// A pauses past its expiration (a GC pause, a stopped VM); B gets
		// the lock once the keys expire, and writes.
		b, err := holderB.Acquire(ctx, []string{"account"}, time.Second, fenced,
			redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Millisecond), redlock.WithRetryJitter(2*time.Millisecond))
		require.NoError(t, err)
		require.False(t, a.Valid(), "A's lock is over by its own account")
		require.Greater(t, b.Token(), a.Token())
		if put(b.Token(), fmt.Sprintf("B%d", i)) {
			fresh++
		}
		// A comes back and writes as if it still held the lock.
		if put(a.Token(), fmt.Sprintf("A%d-stale", i)) {
			stale++
		}
		_, err = b.Release(ctx)
		require.NoError(t, err)
	}
	t.Logf("%d rounds: %d writes of the new holder accepted, %d stale writes accepted", rounds, fresh, stale)
	assert.Equal(t, rounds, fresh)
	assert.Zero(t, stale, "stale writes accepted")
	assert.Equal(t, fmt.Sprintf("B%d", rounds-1), store.Get(ctx, "data").Val())
}

// A write-back that cannot reach a quorum within the lock's validity fails
// the attempt, which is cleaned up like any failed attempt: nothing is left
// held, and the error says what happened.
func TestLateWriteBackFailsTheAttempt(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithNodeTimeout(time.Second))
	acquireToken(t, f.rl, "warm") // the nodes have the fenced scripts
	for _, p := range f.Proxies {
		p.SetLatency(100*time.Millisecond, 100*time.Millisecond) // a round trip of 200ms
	}
	// ttl 300ms: a validity of 295ms, enough for the first round (with
	// 95ms to spare: a loaded CI run took 40ms more than the 80ms round
	// trip of an earlier version), not for both (400ms).
	_, err := f.rl.Acquire(context.Background(), []string{"slow"}, 300*time.Millisecond, fenced, redlock.WithRetryCount(0))
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "fencing token 1 was written back")
	assert.NotErrorIs(t, err, redlock.ErrResourceLocked)
	for _, p := range f.Proxies {
		p.Heal()
	}
	for i := range 3 {
		f.gone(t, i, "slow")
	}
	// The write-back may have landed on some nodes after the attempt
	// failed: the next token may skip a number, never repeat one.
	assert.GreaterOrEqual(t, acquireToken(t, f.rl, "slow"), uint64(2))
}

// A counter that holds something other than a token is refused, naming the
// key and what to do, with nothing written.
func TestBadCounterIsRefused(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	for i := range 3 {
		f.Set(t, i, counterOf("bad"), "not a number", 0)
	}
	_, err := f.rl.Acquire(context.Background(), []string{"bad"}, time.Second, fenced)
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "redlock:fence:{bad}:bad holds not a number")
	assert.Contains(t, err.Error(), "never write to redlock:fence:* keys")
	assert.Equal(t, 1, strings.Count(err.Error(), "retrying cannot fix"))
	var ne *redlock.NodeError
	require.ErrorAs(t, err, &ne)
	for i := range 3 {
		assert.Empty(t, f.Get(t, i, "bad"), "node %d: nothing written", i)
	}
}

// An unfenced Using inside a fenced one: fn's ctx carries no token, not the
// outer lock's (which belongs to other resources).
func TestNestedUnfencedUsingHidesTheOuterToken(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	acquireToken(t, f.rl, "outer")
	err := f.rl.Using(ctx, []string{"outer"}, time.Second, func(octx context.Context) error {
		tok, ok := redlock.TokenFrom(octx)
		assert.True(t, ok)
		assert.Equal(t, uint64(2), tok)
		require.NoError(t, f.rl.Using(octx, []string{"inner"}, time.Second, func(ictx context.Context) error {
			tok, ok := redlock.TokenFrom(ictx)
			assert.False(t, ok, "an unfenced Using inside a fenced one got token %d", tok)
			assert.Zero(t, tok)
			return nil
		}))
		return f.rl.Using(octx, []string{"inner2"}, time.Second, func(ictx context.Context) error {
			tok, ok := redlock.TokenFrom(ictx)
			assert.True(t, ok)
			assert.Equal(t, uint64(1), tok, "a fenced Using inside: its own token")
			return nil
		}, fenced)
	}, fenced)
	require.NoError(t, err)
}

// The largest token, 2^53-1, is drawn once; after it the counter is
// exhausted, and a fenced Acquire says so (and what to do), with nothing
// written.
func TestExhaustedCounter(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	for i := range 3 {
		f.Set(t, i, counterOf("m"), "9007199254740990", 0)
	}
	assert.Equal(t, uint64(1<<53-1), acquireToken(t, f.rl, "m"))
	_, err := f.rl.Acquire(context.Background(), []string{"m"}, time.Second, fenced)
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "fencing tokens exhausted")
	assert.Contains(t, err.Error(), "moved to a new resource name")
	for i := range 3 {
		// The first lock's release returned at its quorum: its last delete
		// may still be on its way.
		assert.Eventually(t, func() bool { return f.Get(t, i, "m") == "" }, time.Second, time.Millisecond, "node %d: nothing written", i)
	}
}

// The counters' namespace is not a resource: a name in it is refused before
// anything is sent.
func TestCounterNamespaceIsNotAResource(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	for _, res := range [][]string{{"redlock:fence:{z}:z"}, {"x", redlock.FenceKey("x")}} {
		_, err := f.rl.Acquire(context.Background(), res, time.Second, fenced)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, "%q", res)
		assert.Contains(t, err.Error(), "namespace of the fencing counters")
	}
}
