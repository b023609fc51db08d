package redlock_test

import (
	"context"
	"fmt"
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

// Regression tests for a defect a probe found (issue 27): a waiter counted a
// node's old announcement of a hand-over, after the node had answered
// "queued" since, and held a lock that another client held too. The node's
// time in both now tells them apart.

// healOnCleanup heals the proxies when the test ends, before the clients
// registered earlier close: a trial that failed half-way leaves partitions
// behind, and a client whose connection set-up is stuck behind one (these
// clients have no timeouts) blocks its Close for ever (a failed trial hung
// until the test binary's 10-minute timeout).
func healOnCleanup(t *testing.T, groups ...[]*redistest.Proxy) {
	t.Cleanup(func() {
		for _, g := range groups {
			for _, px := range g {
				px.Heal()
			}
		}
	})
}

// Mutual exclusion across a fair waiter W and a plain holder X, with only
// minority faults and a delayed message:
//
//   - W cannot reach node 2 (partition W<->node2): it queues on nodes 0, 1.
//   - H (fair holder) releases; its release reaches nodes 0 and 2 at once,
//     node 1 only after L (a slow link H->node1). Node 0 hands R to W
//     (announced); node 2 has no queue there and deletes R.
//   - W's link to node 0 drops for a while (longer than W's ttl): W's id on
//     node 0 expires. A plain X takes nodes 0 and 2: a quorum, a valid lock.
//   - W's link to node 0 heals: W's next attempt gets "queued" from node 0
//     (X holds it), recorded as queuedAt[0], while node 0's earlier
//     announcement is still in W's handedBy.
//   - H's delayed release reaches node 1: node 1 hands R to W and announces.
//     W now counts {0 (stale), 1} as a quorum of hand-overs and returns a
//     lock with no round trip, while X holds {0, 2}.
func TestFairStaleHandOverNotCounted(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	violations := 0
	const trials = 2
	for trial := range trials {
		key := fmt.Sprintf("stale%d", trial)
		H, hOwn := ownRedlock(t, f, ownProxies, redlock.WithFairQueue(true))
		X, _ := ownRedlock(t, f, direct) // plain (unfair)
		hpx := hOwn.proxies
		healOnCleanup(t, f.Proxies, hpx)
		hl, err := H.Acquire(ctx, []string{key}, 10*time.Second)
		require.NoError(t, err)

		var mu sync.Mutex
		var log []string
		lastQueued0 := make(chan time.Time, 100)
		obs := &redlock.Observer{Attempt: func(a redlock.AttemptInfo) {
			var s []string
			q0 := false
			for _, v := range a.Stats.VotesAgainst {
				e := v.Err.Error()
				if len(e) > 30 {
					e = e[:30]
				}
				s = append(s, fmt.Sprintf("%d:%s", v.Node, e))
				if v.Node == 0 && strings.Contains(v.Err.Error(), "held") {
					q0 = true
				}
			}
			mu.Lock()
			log = append(log, fmt.Sprintf("%s #%d for=%v against=%v", a.Stats.Start.Format("05.000"), a.Number, a.Stats.VotesFor, s))
			mu.Unlock()
			if q0 {
				select {
				case lastQueued0 <- a.Stats.Start:
				default:
				}
			}
		}}
		f.Proxies[2].Set(redistest.Partition)
		type res struct {
			l   *redlock.Lock
			err error
			at  time.Time
		}
		wres := make(chan res, 1)
		wctx, wcancel := context.WithCancel(ctx)
		t.Cleanup(wcancel)
		go func() {
			l, err := f.rl.Acquire(wctx, []string{key}, 600*time.Millisecond, redlock.WithRetryCount(-1),
				redlock.WithRetryDelay(100*time.Millisecond), redlock.WithRetryJitter(0), redlock.WithObserver(obs))
			wres <- res{l, err, time.Now()}
		}()
		require.Eventually(t, func() bool {
			return f.Peek[0].ZCard(ctx, fairQueue(key)).Val() == 1 && f.Peek[1].ZCard(ctx, fairQueue(key)).Val() == 1
		}, 5*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond) // W's subscriptions to nodes 0, 1

		const L = 3 * time.Second
		hpx[1].SetLatency(L, 0)
		released := time.Now()
		_, err = hl.Release(ctx)
		t.Logf("trial %d: H.Release (node 1 delayed %v): err=%v", trial, L, err)
		// node 0 hands to W; wait for W's attempt that renews it, then cut W<->node0.
		require.Eventually(t, func() bool { return f.Peek[0].Get(ctx, key).Val() != hl.Value() }, time.Second, time.Millisecond)
		time.Sleep(30 * time.Millisecond)
		t.Logf("node0=%q node1=%q node2=%q", f.Peek[0].Get(ctx, key).Val(), f.Peek[1].Get(ctx, key).Val(), f.Peek[2].Get(ctx, key).Val())
		f.Proxies[0].Set(redistest.Partition)
		xl, err := X.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Millisecond), redlock.WithRetryJitter(0))
		require.NoError(t, err)
		xAt := time.Now()
		t.Logf("X (plain) acquired at +%v, votes for %v, valid until +%v", xAt.Sub(released), xl.Attempts()[len(xl.Attempts())-1].VotesFor, xl.Expiration().Sub(released))
		f.Proxies[0].Heal()
		// drain, then wait for W's attempts to see node 0 "queued" again
		for len(lastQueued0) > 0 {
			<-lastQueued0
		}
		select {
		case <-lastQueued0:
		case <-time.After(2 * time.Second):
			t.Log("W never saw node 0 queued after the heal")
		}
		var w res
		select {
		case w = <-wres:
		case <-time.After(L + time.Second):
			wcancel()
			t.Logf("trial %d: W made no claim-free grant (held off by X, as it should be)", trial)
			<-wres
			_, _ = xl.Release(ctx)
			f.Proxies[2].Heal()
			hpx[1].Heal()
			continue
		}
		wcancel()
		require.NoError(t, w.err)
		xValid, wValid := xl.Valid(), w.l.Valid()
		att := w.l.Attempts()
		last := att[len(att)-1]
		t.Logf("W acquired at +%v: value=%s valid=%v exp=+%v lastAttempt for=%v (quorum %d)", w.at.Sub(released), w.l.Value(), wValid, w.l.Expiration().Sub(released), last.VotesFor, last.QuorumSize)
		t.Logf("X valid=%v until +%v", xValid, xl.Expiration().Sub(released))
		for i, p := range f.Peek {
			t.Logf("node %d: %s=%q pttl=%v", i, key, p.Get(ctx, key).Val(), p.PTTL(ctx, key).Val())
		}
		if xValid && wValid {
			violations++
			t.Errorf("trial %d: TWO HOLDERS: plain X (%s) and fair W (%s) both Valid; overlap %v", trial, xl.Value(), w.l.Value(),
				time.Until(w.l.Expiration()))
			mu.Lock()
			for _, s := range log {
				t.Log("  W attempt " + s)
			}
			mu.Unlock()
		}
		f.Proxies[2].Heal()
		_, _ = w.l.Release(ctx)
		_, _ = xl.Release(ctx)
		hpx[1].Heal()
	}
	t.Logf("violations: %d/%d", violations, trials)
}

// The same with fair clients only: X (fair, began waiting before W) is
// partitioned from nodes 0 and 1 at first, so it queues on node 2 alone;
// W cannot reach node 2. H's release: node 0 hands to W, node 2 to X, node 1
// (slow link) later. W's id on node 0 lapses while W's link to node 0 is
// down; X, healed towards node 0, is head there (earlier score) and takes
// nodes 0 and 2 by attempt. Then node 1 hands to W, which claims {0, 1}.
func TestFairStaleHandOverAllFair(t *testing.T) {
	t.Parallel()
	f := newProxied(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	violations := 0
	const trials = 2
	for trial := range trials {
		key := fmt.Sprintf("stalefair%d", trial)
		H, hOwn := ownRedlock(t, f, ownProxies, redlock.WithFairQueue(true))
		X, xOwn := ownRedlock(t, f, ownProxies, redlock.WithFairQueue(true))
		hpx, xpx := hOwn.proxies, xOwn.proxies
		healOnCleanup(t, f.Proxies, hpx, xpx)
		// H's lock on every node: a new Redlock's Acquire returns at a
		// quorum, and its third write, still setting up a connection on a
		// loaded machine, may never land (CI on 8987f5a: node 2 did not
		// hold H's lock, and H's release found it on 1 of 3 nodes).
		warm(t, H)
		hl, err := H.Acquire(ctx, []string{key}, 10*time.Second)
		require.NoError(t, err)
		for i, p := range f.Peek {
			require.Eventually(t, func() bool { return p.Get(ctx, key).Val() == hl.Value() }, 5*time.Second, time.Millisecond,
				"trial %d: node %d holds H's lock", trial, i)
		}
		// warm X's pools, then cut X from nodes 0 and 1
		wl, err := X.Acquire(ctx, []string{key + "warm"}, time.Second)
		require.NoError(t, err)
		_, _ = wl.Release(ctx)
		xpx[0].Set(redistest.Partition)
		xpx[1].Set(redistest.Partition)
		type res struct {
			l   *redlock.Lock
			err error
			at  time.Time
		}
		xres := make(chan res, 1)
		xctx, xcancel := context.WithCancel(ctx)
		t.Cleanup(xcancel)
		go func() {
			l, err := X.Acquire(xctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond), redlock.WithRetryJitter(0))
			xres <- res{l, err, time.Now()}
		}()
		require.Eventually(t, func() bool { return f.Peek[2].ZCard(ctx, fairQueue(key)).Val() == 1 }, 5*time.Second, time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		f.Proxies[2].Set(redistest.Partition)
		wres := make(chan res, 1)
		wctx, wcancel := context.WithCancel(ctx)
		t.Cleanup(wcancel)
		go func() {
			l, err := f.rl.Acquire(wctx, []string{key}, 600*time.Millisecond, redlock.WithRetryCount(-1),
				redlock.WithRetryDelay(100*time.Millisecond), redlock.WithRetryJitter(0))
			wres <- res{l, err, time.Now()}
		}()
		require.Eventually(t, func() bool {
			return f.Peek[0].ZCard(ctx, fairQueue(key)).Val() == 1 && f.Peek[1].ZCard(ctx, fairQueue(key)).Val() == 1
		}, 5*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond)

		const L = 3 * time.Second
		hpx[1].SetLatency(L, 0)
		released := time.Now()
		_, err = hl.Release(ctx)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return f.Peek[0].Get(ctx, key).Val() != hl.Value() }, time.Second, time.Millisecond)
		time.Sleep(30 * time.Millisecond)
		f.Proxies[0].Set(redistest.Partition) // W loses node 0 for a while
		xpx[0].Heal()                         // X reaches node 0 again
		var x res
		select {
		case x = <-xres:
		case <-time.After(2 * time.Second):
			t.Fatalf("trial %d: X did not get nodes 0 and 2", trial)
		}
		require.NoError(t, x.err)
		t.Logf("trial %d: X (fair) acquired at +%v, last attempt for %v", trial, x.at.Sub(released), x.l.Attempts()[len(x.l.Attempts())-1].VotesFor)
		f.Proxies[0].Heal()
		var w res
		select {
		case w = <-wres:
		case <-time.After(L + time.Second):
			wcancel()
			<-wres
			t.Logf("trial %d: W made no claim-free grant", trial)
		}
		wcancel()
		xcancel()
		if w.l != nil {
			att := w.l.Attempts()
			t.Logf("trial %d: W acquired at +%v, last attempt for=%v; X valid=%v W valid=%v", trial, w.at.Sub(released), att[len(att)-1].VotesFor, x.l.Valid(), w.l.Valid())
			for i, p := range f.Peek {
				t.Logf("node %d: %q pttl=%v", i, p.Get(ctx, key).Val(), p.PTTL(ctx, key).Val())
			}
			if x.l.Valid() && w.l.Valid() {
				violations++
				t.Errorf("trial %d: TWO HOLDERS (fair X %s, fair W %s)", trial, x.l.Value(), w.l.Value())
			}
			_, _ = w.l.Release(ctx)
		}
		_, _ = x.l.Release(ctx)
		f.Proxies[2].Heal()
		xpx[1].Heal()
		hpx[1].Heal()
	}
	t.Logf("violations: %d/%d", violations, trials)
}

// A waiter that waits for replicas (WithReplicaAck) takes a hand-over with
// an attempt, which waits for them, never on the announcements alone: the
// release that hands a resource over is not waited for, and a failover
// could lose it (a probe lost 8 of 8 such grants to a failover).
func TestFairReplicaAckTakesHandOverByAttempt(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t, 2, 3)
	opts := []redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithReplicaAck(2, 400*time.Millisecond), redlock.WithFairQueue(true)}
	mk := func() *redlock.Redlock {
		rl, err := redlock.New([]redis.UniversalClient{g.Client()}, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rl.Close() })
		return rl
	}
	holder, waiter := mk(), mk()
	ctx := context.Background()
	h, err := holder.Acquire(ctx, []string{"fairack"}, 10*time.Second)
	require.NoError(t, err)
	got := make(chan acquired, 1)
	go func() {
		l, err := waiter.Acquire(ctx, []string{"fairack"}, 10*time.Second, redlock.WithRetryCount(-1))
		got <- acquired{l, err}
	}()
	require.Eventually(t, func() bool {
		n, err := g.Client().ZCard(ctx, fairQueue("fairack")).Result()
		return err == nil && n == 1
	}, 10*time.Second, time.Millisecond, "the waiter queued")
	_, err = h.Release(ctx)
	require.NoError(t, err)
	w := <-got
	require.NoError(t, w.err)
	att := w.l.Attempts()
	last := att[len(att)-1]
	assert.Equal(t, []int{0}, last.VotesFor, "granted by an attempt")
	assert.Equal(t, []int{2}, last.ReplicaAcks, "which both replicas acknowledged")
	_, err = w.l.Release(ctx)
	require.NoError(t, err)
}

// A release that hands the resource to different waiters on different
// nodes (nodes missing some waiters from their queues) splits the nodes
// between them; none reaches a quorum, and each renews what it was handed.
// The split ends: a waiter split for a third of a second leaves and queues
// again in its place. (A harness run found waiters split for 8 s.)
func TestFairSplitEnds(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 5, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "split"
	l, err := f.rl.Acquire(ctx, []string{key}, 10*time.Second)
	require.NoError(t, err)
	settled(t, f, key, l.Value()) // on every node before a waiter comes: the call returned at a quorum
	got := make(chan acquired, 3)
	for i := range 3 {
		w, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
		go func() {
			nl, err := w.Acquire(ctx, []string{key}, 10*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			got <- acquired{nl, err}
		}()
		queuedOnNodes(t, f, key, int64(i+1))
	}
	members := f.Peek[0].ZRange(ctx, fairQueue(key), 0, -1).Val()
	require.Len(t, members, 3)
	// The first waiter missing on nodes 2-4, the second on node 4: the
	// release hands nodes 0-1, 2-3 and 4 to three different waiters.
	for i, gone := range map[int][]string{2: members[:1], 3: members[:1], 4: members[:2]} {
		for _, m := range gone {
			require.NoError(t, f.Peek[i].ZRem(ctx, fairQueue(key), m).Err())
			require.NoError(t, f.Peek[i].ZRem(ctx, "redlock:qlive:{"+key+"}:"+key, m).Err())
		}
	}
	released := time.Now()
	_, err = l.Release(ctx)
	require.NoError(t, err)
	t.Logf("handed to %v", f.holders(t, key))
	for range 3 {
		select {
		case g := <-got:
			require.NoError(t, g.err)
			t.Logf("a waiter got the lock %v after the release", time.Since(released))
			_, err := g.l.Release(ctx)
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("the waiters are still split %v after the release", time.Since(released))
		}
	}
}

// A quiet waiter W (renewed with its Redlock's others, making no attempts)
// that the nodes handed the resource to, with the announcement lost, and
// that is no longer the head of the queue (a waiter with an earlier score
// came in after the hand-over: another process with a clock behind, or a
// waiter queued again with its old score) takes what it was handed: the
// renewal that finds the resource holding its id wakes it. (helper-24:
// it was woken only at the head; the resource sat idle for W's whole ttl.)
func TestFairWaiterHandedTheResourceTakesItBehindAnotherHead(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "handednothead"
	live := "redlock:qlive:{" + key + "}:" + key
	h, err := f.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	settled(t, f, key, h.Value())

	rw, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
	type res struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	got := make(chan res, 1)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		l, err := rw.Acquire(wctx, []string{key}, 5*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
		got <- res{l, err, time.Now()}
	}()
	queuedOnNodes(t, f, key, 1)
	time.Sleep(1500 * time.Millisecond) // renewals
	zs, err := f.Peek[0].ZRangeWithScores(ctx, fairQueue(key), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, zs, 1)
	wm := zs[0].Member.(string)
	wid := wm[:strings.LastIndexByte(wm, ':')]
	ghost := "00000000000000000000000000000000:5000" // began in W's millisecond, a smaller id
	// The holder's release, its announcement lost: the key goes to W (the
	// head) on every node. Then a waiter with an earlier score queues.
	handed := time.Now()
	for _, p := range f.Peek {
		require.NoError(t, p.Set(ctx, key, wid, 5*time.Second).Err())
	}
	time.Sleep(50 * time.Millisecond)
	for _, p := range f.Peek {
		now := time.Now().UnixMilli()
		require.NoError(t, p.ZAdd(ctx, fairQueue(key), redis.Z{Score: zs[0].Score, Member: ghost}).Err())
		require.NoError(t, p.ZAdd(ctx, live, redis.Z{Score: float64(now + 60000), Member: ghost}).Err())
	}
	select {
	case r := <-got:
		require.NoError(t, r.err)
		t.Logf("W got the lock %v after the hand-over; holders %v", r.at.Sub(handed), f.holders(t, key))
	case <-time.After(4 * time.Second): // a renewal comes every 333ms
		t.Errorf("W did not take the lock handed to it on every node within 4s (holders %v, PTTL %v)", f.holders(t, key), f.PTTL(t, 0, key))
	}
}

// A release that the nodes hand to three different quiet waiters (their
// queues differed), while the waiter that heads them all had lapsed and
// queues again: no one has a quorum, and the split ends (unsplit) within a
// few seconds, not the ttl (20s). The waiters whose last attempt split the
// nodes are never quiet, and a renewal that finds the resource holding a
// waiter's id wakes it. (helper-24: each made one attempt and went quiet;
// the resource sat idle for the whole ttl, in 5 of 5 runs.)
func TestFairSplitBetweenQuietWaitersEnds(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithFairQueue(true))
	ctx := context.Background()
	key := "splitquiet"
	ttl := 20 * time.Second
	var wg sync.WaitGroup
	defer wg.Wait()
	h, err := f.rl.Acquire(ctx, []string{key}, time.Minute)
	require.NoError(t, err)
	settled(t, f, key, h.Value())
	type res struct {
		name string
		err  error
		at   time.Time
	}
	got := make(chan res, 4)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ra, aOwn := ownRedlock(t, f, ownProxies, redlock.WithFairQueue(true))
	healOnCleanup(t, aOwn.proxies)
	spawn(&wg, func() {
		l, err := ra.Acquire(wctx, []string{key}, ttl, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond))
		got <- res{"A", err, time.Now()}
		if err == nil {
			time.Sleep(5 * time.Millisecond)
			_, _ = l.Release(context.Background())
		}
	})
	queuedOnNodes(t, f, key, 1)
	time.Sleep(5 * time.Millisecond)
	for i, name := range []string{"B", "C", "D"} {
		rl, _ := ownRedlock(t, f, viaF, redlock.WithFairQueue(true))
		spawn(&wg, func() {
			l, err := rl.Acquire(wctx, []string{key}, ttl, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond))
			got <- res{name, err, time.Now()}
			if err == nil {
				time.Sleep(5 * time.Millisecond)
				_, _ = l.Release(context.Background())
			}
		})
		queuedOnNodes(t, f, key, int64(i+2))
		time.Sleep(5 * time.Millisecond)
	}
	// A is cut off from every node: its place lapses (a liveness, 1s).
	for _, px := range aOwn.proxies {
		px.Set(redistest.Partition)
	}
	queuedOnNodes(t, f, key, 3)
	time.Sleep(500 * time.Millisecond) // renewals: B, C, D quiet
	zs, err := f.Peek[0].ZRangeWithScores(ctx, fairQueue(key), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, zs, 3)
	m := func(i int) string { return zs[i].Member.(string) }
	// Queues that differ: node 1 lacks B, node 2 lacks B and C.
	require.NoError(t, f.Peek[1].ZRem(ctx, fairQueue(key), m(0)).Err())
	require.NoError(t, f.Peek[2].ZRem(ctx, fairQueue(key), m(0), m(1)).Err())
	_, err = h.Release(ctx)
	require.NoError(t, err)
	released := time.Now()
	// A is back: it queues again with the score it had, ahead of B.
	for _, px := range aOwn.proxies {
		px.Heal()
	}
	short := func(v string) string {
		if i := strings.IndexByte(v, '@'); i > 8 {
			return v[:8]
		}
		return v
	}
	time.Sleep(20 * time.Millisecond)
	// A's place on any node, not node 0's queue's length: B, C or D may
	// leave it first, and A may queue on a quorum without node 0. A's
	// coming back is the scenario, not the guarantee (the split ends,
	// below): after the partition A sets its connections up again, which
	// took over 2s under CI's load (3 CI runs of about 20; its cause is
	// not found: docs/test-runs.md).
	back := func() bool {
		for _, p := range f.Peek {
			for _, w := range p.ZRange(ctx, fairQueue(key), 0, -1).Val() {
				if w != m(0) && w != m(1) && w != m(2) {
					return true
				}
			}
		}
		return false
	}
	require.Eventually(t, back, 5*time.Second, time.Millisecond, "A queued again")
	t.Logf("A queued again %v after the release; queue heads %v %v %v", time.Since(released), f.Peek[0].ZRange(ctx, fairQueue(key), 0, 0).Val(), f.Peek[1].ZRange(ctx, fairQueue(key), 0, 0).Val(), f.Peek[2].ZRange(ctx, fairQueue(key), 0, 0).Val())
	var hs []string
	for _, v := range f.holders(t, key) {
		hs = append(hs, short(v))
	}
	t.Logf("after the release: holders %v (B=%s C=%s D=%s)", hs, short(m(0)), short(m(1)), short(m(2)))
	select {
	case r := <-got:
		t.Logf("%s got the lock %v after the release (err %v)", r.name, r.at.Sub(released), r.err)
	case <-time.After(8 * time.Second):
		hs = nil
		for _, v := range f.holders(t, key) {
			hs = append(hs, short(v))
		}
		t.Errorf("no one got the lock within 8s of the release: holders %v, PTTL %v", hs, f.PTTL(t, 0, key))
	}
}
