// Package drivertest checks a [driver.Node] implementation against real
// redis-server processes on loopback, as testing/fstest checks an fs.FS:
// every adapter module of this repository runs [Run], and so does the
// library for go-redis's own nodes, so that each client gets the same
// proof. It needs redis-server (and redis-cli, for a Cluster) on PATH, or
// in the folder $REDISTEST_SERVER_DIR names; without them the tests skip,
// unless $CI is set.
//
//	func TestRueidis(t *testing.T) {
//		drivertest.Run(t, drivertest.Driver{
//			Node: func(t testing.TB, addr string) driver.Node { ... },
//		})
//	}
package drivertest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/internal/script"
)

// Driver makes the nodes under test.
type Driver struct {
	// Node returns a node that reaches the one server at addr, through a
	// client that the test closes when it ends (tb.Cleanup).
	Node func(tb testing.TB, addr string) driver.Node
	// Cluster returns a node of the Redis Cluster whose seeds are addrs, or
	// is nil when the client has no Cluster client.
	Cluster func(tb testing.TB, addrs []string) driver.Node
	// Down returns, as Node does, a node of the one server at addr, made
	// while nothing listens there: the server starts later, and the node
	// must reach it then. Nil: Node is used (go-redis's clients dial when
	// first used).
	Down func(tb testing.TB, addr string) driver.Node
}

// Run runs the checks, each as a subtest on servers of its own.
func Run(t *testing.T, d Driver) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, d)
		})
	}
	t.Run("Cluster", func(t *testing.T) {
		if d.Cluster == nil {
			t.Skip("the client has no Cluster client")
		}
		cluster(t, d)
	})
}

var checks = []struct {
	name string
	run  func(*testing.T, Driver)
}{
	{"Lock", lock},
	{"ExcludesGoRedis", excludesGoRedis},
	{"ScriptsFlushed", scriptsFlushed},
	{"RefusalEndsTheCall", refusal},
	{"PausedAndHungNodes", faults},
	{"WakeOnRelease", wakeOnRelease},
	{"Fencing", fencing},
	{"ReplicaAck", replicaAck},
	{"WaitHoldsUpNoOtherLock", waitHoldsUpNoOtherLock},
	{"Election", election},
	{"Semaphore", semaphore},
	{"FairQueue", fairQueue},
	{"OneServerTwice", oneServerTwice},
	{"StartsWithANodeDown", startsWithANodeDown},
	{"ExtensionsTogether", extensionsTogether},
}

// servers starts n servers, and returns them with nodes of d on them.
func servers(t *testing.T, d Driver, n int) ([]*redistest.Node, []driver.Node) {
	t.Helper()
	srv := redistest.Start(t, n)
	nodes := make([]driver.Node, n)
	for i, s := range srv {
		nodes[i] = d.Node(t, s.Addr())
	}
	return srv, nodes
}

// newRedlock returns a Redlock over nodes, closed when the test ends.
func newRedlock(t *testing.T, nodes []driver.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	rl, err := redlock.NewFromNodes(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rl.Close() })
	return rl
}

// goRedis returns a Redlock over go-redis clients of srv.
func goRedis(t *testing.T, srv []*redistest.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	cs := make([]redis.UniversalClient, len(srv))
	for i, s := range srv {
		cs[i] = s.Client()
	}
	rl, err := redlock.New(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rl.Close() })
	return rl
}

// holds reports whether every server holds key with value (the calls
// return at a quorum: the last server may be a moment later).
func holds(t *testing.T, srv []*redistest.Node, key, value string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range srv {
		for {
			v, _ := s.Client().Get(context.Background(), key).Result()
			if v == value {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s holds %q at %s, want %q", s.Addr(), v, key, value)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// extensionsTogether: 200 locks extended at once on servers 5ms away go in
// a few script calls per server (script.ExtendMany), and each lock's answer
// is its own: extended, or on the server where its key holds a hash,
// refused with WRONGTYPE while the others extend.
func extensionsTogether(t *testing.T, d Driver) {
	ctx := context.Background()
	srv := redistest.Start(t, 3)
	nodes := make([]driver.Node, 3)
	for i, s := range srv {
		px := redistest.NewProxy(t, s.Addr())
		px.SetLatency(5*time.Millisecond, 0)
		nodes[i] = d.Node(t, px.Addr())
	}
	rl := newRedlock(t, nodes, redlock.WithNodeTimeout(time.Second))
	locks := make([]*redlock.Lock, 200)
	for i := range locks {
		l, err := rl.Acquire(ctx, []string{"many:" + strconv.Itoa(i)}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = l
	}
	const odd = 17 // its key is a hash on server 0
	if err := srv[0].Client().Del(ctx, "many:17").Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv[0].Client().HSet(ctx, "many:17", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	calls := func(s *redistest.Node) int {
		info := s.Client().Info(ctx, "commandstats").Val()
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
	before := []int{calls(srv[0]), calls(srv[1]), calls(srv[2])}
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.Extend(ctx, 2*time.Minute)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("lock %d: Extend = %v", i, err)
		}
	}
	for i, s := range srv {
		if n := calls(s) - before[i]; n >= len(locks)/4 {
			t.Errorf("server %d ran %d script calls for %d extensions due together", i, n, len(locks))
		}
	}
	for i, l := range locks {
		if i == odd {
			continue
		}
		if got := srv[1].Client().PTTL(ctx, l.Resources()[0]).Val(); got < time.Minute+30*time.Second {
			t.Errorf("lock %d: ttl %v on server 1 after its extension to 2m", i, got)
		}
	}
	if v, _ := srv[0].Client().Type(ctx, "many:17").Result(); v != "hash" {
		t.Errorf("the hash at many:17 on server 0 is a %s after the extensions", v)
	}
}

// lock: acquire, extend, release; a second Redlock is refused while it is
// held.
func lock(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	rl := newRedlock(t, nodes)
	l, err := rl.Acquire(ctx, []string{"a", "b"}, 10*time.Second)
	fatal(t, err)
	holds(t, srv, "a", l.Value())
	holds(t, srv, "b", l.Value())
	other := newRedlock(t, []driver.Node{d.Node(t, srv[0].Addr()), d.Node(t, srv[1].Addr()), d.Node(t, srv[2].Addr())})
	if _, err := other.Acquire(ctx, []string{"b"}, time.Second, redlock.WithRetryCount(0)); !errors.Is(err, redlock.ErrResourceLocked) {
		t.Fatalf("a second Redlock's Acquire of a held resource: %v, want ErrResourceLocked", err)
	}
	l2, err := l.Extend(ctx, 20*time.Second)
	fatal(t, err)
	if ttl := srv[0].Client().PTTL(ctx, "a").Val(); ttl <= 10*time.Second {
		t.Fatalf("after Extend to 20s the key's ttl is %v", ttl)
	}
	if _, err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range srv {
		if !waitGone(s, "a") {
			t.Fatalf("server %s still holds a after the release", s.Addr())
		}
	}
	if _, err := other.Acquire(ctx, []string{"b"}, time.Second, redlock.WithRetryCount(0)); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits up to 5s for key to be gone from s.
func waitGone(s *redistest.Node, key string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if s.Client().Exists(context.Background(), key).Val() == 0 {
			return true
		}
	}
	return false
}

// excludesGoRedis: a lock taken through the driver excludes one through
// go-redis on the same servers, both ways, and under contention no two
// holders overlap.
func excludesGoRedis(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	mine, theirs := newRedlock(t, nodes), goRedis(t, srv)
	l, err := mine.Acquire(ctx, []string{"x"}, 10*time.Second)
	fatal(t, err)
	if _, err := theirs.Acquire(ctx, []string{"x"}, time.Second, redlock.WithRetryCount(0)); !errors.Is(err, redlock.ErrResourceLocked) {
		t.Fatalf("go-redis's Acquire of a resource held through the driver: %v, want ErrResourceLocked", err)
	}
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = theirs.Acquire(ctx, []string{"x"}, 10*time.Second, redlock.WithRetryCount(-1))
	fatal(t, err)
	if _, err := mine.Acquire(ctx, []string{"x"}, time.Second, redlock.WithRetryCount(0)); !errors.Is(err, redlock.ErrResourceLocked) {
		t.Fatalf("the driver's Acquire of a resource held through go-redis: %v, want ErrResourceLocked", err)
	}
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var inside, overlaps atomic.Int32
	var grants [2]atomic.Int32
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for g := range 8 {
		rl := []*redlock.Redlock{mine, theirs}[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				l, err := rl.Acquire(ctx, []string{"c"}, 5*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(5*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				grants[g%2].Add(1)
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if _, err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d overlapping holders between the driver and go-redis", n)
	}
	t.Logf("grants: driver %d, go-redis %d, no overlap", grants[0].Load(), grants[1].Load())
}

// scriptsFlushed: a server that lost its scripts (SCRIPT FLUSH, a restart)
// is sent them again.
func scriptsFlushed(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	rl := newRedlock(t, nodes)
	warm(t, rl, "f")
	for _, s := range srv {
		if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := rl.Acquire(ctx, []string{"f"}, time.Second, redlock.WithRetryCount(0))
	fatal(t, err)
	holds(t, srv, "f", l.Value())
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// refusal: a server's error reply that no retry can change ends the call
// after its first attempt, and names itself: a WRONGTYPE; the library's own
// "ERR redlock: mixed kinds" (bad input: ErrInvalidArgument); an unknown
// command (WAITAOF on a server before 7.2), which a client that drops
// "ERR " from its errors (rueidis) would hide.
func refusal(t *testing.T, d Driver) {
	refusalWrongType(t, d)
	ctx := context.Background()
	_, nodes := servers(t, d, 3)
	rl := newRedlock(t, nodes, redlock.WithRetryCount(10), redlock.WithRetryDelay(200*time.Millisecond))
	sem, err := rl.Acquire(ctx, []string{"k"}, 5*time.Second, redlock.WithPermits(2))
	fatal(t, err)
	_, err = rl.Acquire(ctx, []string{"k"}, time.Second, redlock.WithShared(true))
	var ee *redlock.ExecutionError
	if !errors.As(err, &ee) || len(ee.Attempts) != 1 || !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("a shared lock on a semaphore: %v; want 1 attempt, matching ErrInvalidArgument", err)
	}
	_, _ = sem.Release(ctx)
	if redistest.Version(t).AtLeast(7, 2) {
		return
	}
	_, err = rl.Acquire(ctx, []string{"aof"}, time.Second, redlock.WithAOFAck(false, 1, 100*time.Millisecond), redlock.WithNodeTimeout(500*time.Millisecond))
	if !errors.As(err, &ee) || len(ee.Attempts) != 1 || !strings.Contains(err.Error(), "lacks WAITAOF") {
		t.Fatalf("WithAOFAck on %s: %v; want 1 attempt, the server's lack of WAITAOF named", redistest.Version(t), err)
	}
}

func refusalWrongType(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	for _, s := range srv {
		if err := s.Client().HSet(ctx, "h", "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	rl := newRedlock(t, nodes)
	_, err := rl.Acquire(ctx, []string{"h"}, time.Second, redlock.WithFencing(true), redlock.WithRetryCount(10), redlock.WithRetryDelay(200*time.Millisecond))
	var ee *redlock.ExecutionError
	if !errors.As(err, &ee) {
		t.Fatalf("Acquire of a hash key: %v, want an *ExecutionError", err)
	}
	if len(ee.Attempts) != 1 || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Acquire of a hash key: %d attempts, %v; want 1 attempt, WRONGTYPE named", len(ee.Attempts), err)
	}
}

// faults: of 5 servers, one paused (SIGSTOP) and one behind a proxy that
// hangs: a lock is granted (a minority faulty), within a bound set by the
// node timeout, not by the client's own timeouts; with a third paused, no
// lock, within the same bound. Close then returns within the bound too.
func faults(t *testing.T, d Driver) {
	ctx := context.Background()
	srv := redistest.Start(t, 5)
	px := redistest.NewProxy(t, srv[4].Addr())
	nodes := []driver.Node{d.Node(t, srv[0].Addr()), d.Node(t, srv[1].Addr()), d.Node(t, srv[2].Addr()), d.Node(t, srv[3].Addr()), d.Node(t, px.Addr())}
	rl, err := redlock.NewFromNodes(nodes, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithWakeOnRelease(false))
	if err != nil {
		t.Fatal(err)
	}
	warm(t, rl, "warm")
	srv[3].Pause()
	defer srv[3].Resume()
	px.Set(redistest.DropReplies)
	// Bound: 100ms per node, 3 attempts and their delays, and slack for a
	// loaded machine; an unbounded wait would be the client's own timeouts.
	const bound = 3 * time.Second
	start := time.Now()
	l, err := rl.Acquire(ctx, []string{"p"}, 5*time.Second, redlock.WithRetryCount(2))
	if err != nil {
		t.Fatalf("a minority of 2 faulty nodes of 5: %v", err)
	}
	took := time.Since(start)
	if took > bound {
		t.Fatalf("Acquire with 2 faulty nodes of 5 took %v, bound %v", took, bound)
	}
	srv[2].Pause()
	defer srv[2].Resume()
	start = time.Now()
	_, err = rl.Acquire(ctx, []string{"q"}, 5*time.Second, redlock.WithRetryCount(2))
	if err == nil {
		t.Fatal("a lock granted with 3 faulty nodes of 5")
	}
	refused := time.Since(start)
	if refused > bound {
		t.Fatalf("Acquire with 3 faulty nodes of 5 took %v, bound %v", refused, bound)
	}
	t.Logf("2 faulty nodes of 5 (paused, hung): granted in %v; 3 faulty: refused in %v (3 attempts; bound %v)", took, refused, bound)
	_, _ = l.Release(ctx)
	srv[2].Resume()
	srv[3].Resume()
	px.Set(redistest.Healthy)
	// Close sends the releases still held and waits for the calls still
	// out, for a bounded time: it returns nil, or says what it gave up on.
	start = time.Now()
	err = rl.Close()
	if took := time.Since(start); took > bound {
		t.Fatalf("Close after the nodes came back took %v (%v), bound %v", took, err, bound)
	}
	if err != nil && !strings.Contains(err.Error(), "still waiting") {
		t.Fatalf("Close after the nodes came back: %v", err)
	}
}

// wakeOnRelease: a waiter whose retry delay is an hour gets the lock when
// it is released: the release's announcement woke it.
func wakeOnRelease(t *testing.T, d Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, nodes := servers(t, d, 3)
	rl := newRedlock(t, nodes)
	l, err := rl.Acquire(ctx, []string{"w"}, 20*time.Second)
	fatal(t, err)
	var woken atomic.Bool
	obs := &redlock.Observer{Wait: func(w redlock.WaitInfo) {
		if w.Woken {
			woken.Store(true)
		}
	}}
	got := make(chan error, 1)
	waited := make(chan struct{})
	go func() {
		close(waited)
		wl, err := rl.Acquire(ctx, []string{"w"}, time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour), redlock.WithObserver(obs))
		if err == nil {
			_, err = wl.Release(context.Background())
		}
		got <- err
	}()
	<-waited
	time.Sleep(200 * time.Millisecond) // the waiter's first attempt failed: it waits an hour, or the wake
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v (an hour's retry delay: only the release's announcement wakes it before the test's 30s)", err)
	}
	if !woken.Load() {
		t.Fatal("the waiter got the lock without a wake")
	}
}

// fencing: tokens grow across locks and across clients.
func fencing(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	mine, theirs := newRedlock(t, nodes, redlock.WithFencing(true)), goRedis(t, srv, redlock.WithFencing(true))
	var last uint64
	for i := range 6 {
		rl := []*redlock.Redlock{mine, theirs}[i%2]
		l, err := rl.Acquire(ctx, []string{"t"}, 5*time.Second)
		fatal(t, err)
		if l.Token() <= last {
			t.Fatalf("lock %d's token %d, after %d", i, l.Token(), last)
		}
		last = l.Token()
		if _, err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// replicaAck: a lock that waits for replicas (WAIT after its script, on
// its connection) hears each node's replica acknowledge it.
func replicaAck(t *testing.T, d Driver) {
	ctx := context.Background()
	primaries, _ := redistest.StartWithReplicas(t, 3, 1)
	nodes := make([]driver.Node, len(primaries))
	for i, p := range primaries {
		nodes[i] = d.Node(t, p.Addr())
	}
	rl := newRedlock(t, nodes, redlock.WithReplicaAck(1, time.Second), redlock.WithNodeTimeout(3*time.Second))
	l, err := rl.Acquire(ctx, []string{"r"}, 10*time.Second)
	fatal(t, err)
	st := l.Attempts()[len(l.Attempts())-1]
	acked := 0
	for _, n := range st.VotesFor {
		if st.ReplicaAcks != nil && st.ReplicaAcks[n] >= 1 {
			acked++
		}
	}
	if acked < rl.Quorum() {
		t.Fatalf("%d nodes' replicas acknowledged the lock (ReplicaAcks %v), want a quorum of %d", acked, st.ReplicaAcks, rl.Quorum())
	}
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitHoldsUpNoOtherLock: while a lock waits for replicas that do not
// answer (paused: each WAIT takes its whole timeout), a plain lock through
// the same nodes is granted within its node timeout: a client's shared
// connection must not queue it behind the WAIT.
func waitHoldsUpNoOtherLock(t *testing.T, d Driver) {
	ctx := context.Background()
	primaries, replicas := redistest.StartWithReplicas(t, 3, 1)
	nodes := make([]driver.Node, len(primaries))
	for i, p := range primaries {
		nodes[i] = d.Node(t, p.Addr())
	}
	rl := newRedlock(t, nodes, redlock.WithNodeTimeout(300*time.Millisecond))
	warm(t, rl, "warm")
	for _, r := range replicas {
		r[0].Pause()
		defer r[0].Resume()
	}
	acked := make(chan error, 1)
	go func() {
		_, err := rl.Acquire(ctx, []string{"acked"}, 10*time.Second, redlock.WithReplicaAck(1, 2*time.Second),
			redlock.WithNodeTimeout(5*time.Second), redlock.WithRetryCount(0))
		acked <- err
	}()
	time.Sleep(200 * time.Millisecond) // the WAITs are waiting
	l, err := rl.Acquire(ctx, []string{"plain"}, 5*time.Second, redlock.WithRetryCount(0))
	if err != nil {
		t.Fatalf("a plain lock while another waits for paused replicas: %v", err)
	}
	_, _ = l.Release(ctx)
	if err := <-acked; err == nil {
		t.Fatal("a lock whose replicas were paused was granted with WithReplicaAck")
	}
}

// election: one leader at a time, terms numbered upward, across clients.
func election(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	mine, theirs := newRedlock(t, nodes), goRedis(t, srv)
	t1, err := mine.Election("e").Campaign(ctx, "a", 5*time.Second)
	fatal(t, err)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = theirs.Election("e").Campaign(cctx, "b", 5*time.Second)
	cancel()
	if err == nil {
		t.Fatal("two leaders at once")
	}
	if err := t1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	t2, err := theirs.Election("e").Campaign(ctx, "b", 5*time.Second)
	fatal(t, err)
	if t2.Number() <= t1.Number() {
		t.Fatalf("term %d after term %d", t2.Number(), t1.Number())
	}
	ld, err := mine.Election("e").Leader(ctx)
	fatal(t, err)
	if ld.ID != "b" {
		t.Fatalf("the leader seen through the driver is %q, want b", ld.ID)
	}
	_ = t2.Resign(ctx)
}

// semaphore: at most n holders, across clients.
func semaphore(t *testing.T, d Driver) {
	ctx := context.Background()
	srv, nodes := servers(t, d, 3)
	mine, theirs := newRedlock(t, nodes), goRedis(t, srv)
	a, err := mine.Acquire(ctx, []string{"s"}, 5*time.Second, redlock.WithPermits(2))
	fatal(t, err)
	b, err := theirs.Acquire(ctx, []string{"s"}, 5*time.Second, redlock.WithPermits(2))
	fatal(t, err)
	if _, err := mine.Acquire(ctx, []string{"s"}, 5*time.Second, redlock.WithPermits(2), redlock.WithRetryCount(0)); !errors.Is(err, redlock.ErrResourceLocked) {
		t.Fatalf("a third holder of 2 permits: %v, want ErrResourceLocked", err)
	}
	if _, err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := mine.Acquire(ctx, []string{"s"}, 5*time.Second, redlock.WithPermits(2), redlock.WithRetryCount(-1))
	fatal(t, err)
	if _, err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// fairQueue: waiters get the lock in the order they began waiting, each
// handed it by the release before, woken by its announcement.
func fairQueue(t *testing.T, d Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, nodes := servers(t, d, 3)
	rl := newRedlock(t, nodes, redlock.WithFairQueue(true))
	l, err := rl.Acquire(ctx, []string{"q"}, 20*time.Second)
	fatal(t, err)
	holds(t, srv, "q", l.Value())
	order := make(chan int, 3)
	for i := range 3 {
		w := newRedlock(t, []driver.Node{d.Node(t, srv[0].Addr()), d.Node(t, srv[1].Addr()), d.Node(t, srv[2].Addr())}, redlock.WithFairQueue(true))
		go func() {
			wl, err := w.Acquire(ctx, []string{"q"}, 5*time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			order <- i
			_, _ = wl.Release(ctx)
		}()
		queued(t, srv, "q", int64(i+1))
	}
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d got the lock in place %d", got, want)
		}
	}
}

// queued waits until every server queues n waiters for key.
func queued(t *testing.T, srv []*redistest.Node, key string, n int64) {
	t.Helper()
	q := script.Key(script.QueuePrefix, key)
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range srv {
		for s.Client().ZCard(context.Background(), q).Val() != n {
			if time.Now().After(deadline) {
				t.Fatalf("server %s queues %d waiters for %s, want %d", s.Addr(), s.Client().ZCard(context.Background(), q).Val(), key, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// oneServerTwice: a server reached under two names (here, directly and
// through a proxy) votes once: the name that answered later votes against.
func oneServerTwice(t *testing.T, d Driver) {
	ctx := context.Background()
	srv := redistest.Start(t, 2)
	px := redistest.NewProxy(t, srv[0].Addr())
	twin := d.Node(t, px.Addr())
	if !twin.Info().OneServer {
		t.Skip("the driver's node of one server does not say OneServer: it is not asked its run_id")
	}
	rl := newRedlock(t, []driver.Node{d.Node(t, srv[0].Addr()), twin, d.Node(t, srv[1].Addr())})
	for i := range 5 {
		// A key each: the first round of the second name, sent before its
		// server said who it is, may write its key there after the release.
		l, err := rl.Acquire(ctx, []string{"twice" + strconv.Itoa(i)}, time.Second, redlock.WithRetryCount(0))
		fatal(t, err)
		for _, st := range l.Attempts() {
			// Whichever name answered first is the server's; the other
			// votes against.
			if slices.Contains(st.VotesFor, 0) && slices.Contains(st.VotesFor, 1) {
				t.Fatalf("lock %d: both names of one server voted for it (votes for: %v)", i, st.VotesFor)
			}
		}
		_, err = l.Release(ctx)
		fatal(t, err)
	}
}

// startsWithANodeDown: a Redlock made while one node of three is down
// locks on the other two, and counts that node's vote once it is up.
func startsWithANodeDown(t *testing.T, d Driver) {
	ctx := context.Background()
	srv := redistest.Start(t, 3)
	srv[2].Kill()
	down := d.Down
	if down == nil {
		down = d.Node
	}
	rl := newRedlock(t, []driver.Node{d.Node(t, srv[0].Addr()), d.Node(t, srv[1].Addr()), down(t, srv[2].Addr())})
	l, err := rl.Acquire(ctx, []string{"down"}, 5*time.Second, redlock.WithRetryCount(0))
	if err != nil {
		t.Fatalf("Acquire with node 2 of 3 down since the start: %v", err)
	}
	if st := l.Attempts()[len(l.Attempts())-1]; slices.Contains(st.VotesFor, 2) {
		t.Fatalf("node 2, down, voted for the lock (votes for: %v)", st.VotesFor)
	}
	_, err = l.Release(ctx)
	fatal(t, err)
	srv[2].Restart()
	// Node 0 down now: a lock needs node 2's vote. Its client may be
	// waiting out a backoff (5s at most for the adapters' Dial): the vote
	// comes within a few seconds.
	srv[0].Kill()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		l, err := rl.Acquire(ctx, []string{"up" + strconv.Itoa(i)}, 5*time.Second, redlock.WithRetryCount(0))
		if err == nil {
			st := l.Attempts()[len(l.Attempts())-1]
			_, err = l.Release(ctx)
			fatal(t, err)
			if !slices.Contains(st.VotesFor, 2) {
				t.Fatalf("a lock granted with node 0 down, without node 2's vote (votes for: %v)", st.VotesFor)
			}
			t.Logf("node 2 voted for lock %d, after its server started", i)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2's vote: none 15s after its server started: Acquire: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cluster: a Cluster as one node of three: locks on hash-tagged
// resources, and a waiter woken by a release's sharded announcement.
func cluster(t *testing.T, d Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	redistest.ByDesign(t, 7, 0, "sharded pub/sub (SSUBSCRIBE)")
	cl := redistest.StartCluster(t, 3)
	srv := redistest.Start(t, 2)
	addrs := make([]string, len(cl))
	for i, n := range cl {
		addrs[i] = n.Addr()
	}
	nodes := []driver.Node{d.Cluster(t, addrs), d.Node(t, srv[0].Addr()), d.Node(t, srv[1].Addr())}
	if !nodes[0].Info().Cluster {
		t.Fatal("a Cluster's node does not say Cluster")
	}
	// The same Cluster through go-redis too (one seed): it would vote twice.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:1]})
	t.Cleanup(func() { _ = cc.Close() })
	if _, err := redlock.NewFromNodes([]driver.Node{nodes[0], driver.GoRedis(cc), nodes[1]}); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("one Cluster as two nodes (through the client and go-redis): %v, want ErrInvalidArgument", err)
	}
	rl := newRedlock(t, nodes)
	for _, keys := range [][]string{{"{o}:1", "{o}:2"}, {"a"}, {"b"}, {"c"}, {"d"}} {
		l, err := rl.Acquire(ctx, keys, 10*time.Second)
		fatal(t, err)
		if _, err := rl.Acquire(ctx, keys, time.Second, redlock.WithRetryCount(0)); !errors.Is(err, redlock.ErrResourceLocked) {
			t.Fatalf("a second Acquire of %v on a Cluster: %v, want ErrResourceLocked", keys, err)
		}
		if _, err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		l, err := rl.Acquire(ctx, []string{k}, 20*time.Second)
		fatal(t, err)
		got := make(chan error, 1)
		go func() {
			wl, err := rl.Acquire(ctx, []string{k}, time.Second, redlock.WithRetryCount(-1), redlock.WithRetryDelay(time.Hour))
			if err == nil {
				_, err = wl.Release(context.Background())
			}
			got <- err
		}()
		time.Sleep(200 * time.Millisecond)
		if _, err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("a waiter for %s on a Cluster: %v (an hour's delay: only a wake ends it before the test's timeout)", k, err)
		}
	}
}

// fatal ends the test on err.
func fatal(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// warm takes and releases key through rl.
func warm(t *testing.T, rl *redlock.Redlock, key string) {
	t.Helper()
	l, err := rl.Acquire(context.Background(), []string{key}, time.Second)
	fatal(t, err)
	_, err = l.Release(context.Background())
	fatal(t, err)
}
