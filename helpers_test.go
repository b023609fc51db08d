package redlock_test

import (
	"context"
	"slices"
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

// fixture is a Redlock over the nodes of a redistest.Fixture. Every test
// that needs real nodes builds one with newFixture (or its shortcuts).
type fixture struct {
	*redistest.Fixture
	rl     *redlock.Redlock
	client *redis.Options // what its clients were made with (Setup.Client; nil: go-redis's defaults)
}

// fast makes failing calls quick: the tests count attempts, not wait.
var fast = []redlock.Option{redlock.WithRetryDelay(10 * time.Millisecond), redlock.WithRetryJitter(5 * time.Millisecond)}

// newFixture sets up the nodes s describes and a Redlock over them, closed
// before its clients when the test ends.
func newFixture(t testing.TB, s redistest.Setup, opts ...redlock.Option) *fixture {
	t.Helper()
	f := &fixture{Fixture: redistest.New(t, s), client: s.Client}
	rl, err := redlock.New(f.Clients, opts...)
	require.NoError(t, err, "New(%d clients)", len(f.Clients))
	t.Cleanup(func() { _ = rl.Close() }) // before the clients close
	f.rl = rl
	return f
}

// newNodes is a Redlock over n new independent nodes.
func newNodes(t testing.TB, n int, opts ...redlock.Option) *fixture {
	t.Helper()
	return newFixture(t, redistest.Setup{Nodes: n}, opts...)
}

// newProxied is a Redlock over n nodes, each behind a fault proxy, whose
// clients have no timeouts of their own (only redlock's node timeout bounds
// a call), with every pool warmed while all is healthy.
func newProxied(t testing.TB, n int, opts ...redlock.Option) *fixture {
	t.Helper()
	f := newFixture(t, redistest.Setup{Nodes: n, Proxied: true, Client: redistest.NoClientTimeouts}, opts...)
	warm(t, f.rl)
	return f
}

// route is where the clients of an ownRedlock connect.
type route int

const (
	viaF       route = iota // where f's clients do: through f's proxies, when it has them
	direct                  // straight to the nodes, past any proxy of f's
	ownProxies              // each through a fault proxy of its own, one per node
)

// own is what an ownRedlock has of its own: its clients, and with
// ownProxies its proxies (in node order).
type own struct {
	clients []*redis.Client
	proxies []*redistest.Proxy
}

// ownRedlock is another process's Redlock over f's nodes: clients of its
// own, made with f's client options, connected as r says. It closes when
// the test ends, then its clients, then its proxies.
func ownRedlock(t *testing.T, f *fixture, r route, opts ...redlock.Option) (*redlock.Redlock, own) {
	t.Helper()
	var cs []redis.UniversalClient
	var mine own
	for i, nd := range f.Nodes {
		o := redis.Options{}
		if f.client != nil {
			o = *f.client
		}
		switch r {
		case viaF:
			// Addr only: the client's options are its own to write while
			// it connects.
			o.Addr = f.Client(i).Options().Addr
		case direct:
			o.Addr = nd.Addr()
		case ownProxies:
			px := redistest.NewProxy(t, nd.Addr())
			mine.proxies = append(mine.proxies, px)
			o.Addr = px.Addr()
		}
		c := redis.NewClient(&o)
		cs = append(cs, c)
		mine.clients = append(mine.clients, c)
	}
	rl, err := redlock.New(cs, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = rl.Close()
		// Cut what runs through proxies first: a connection set up
		// through a hung one by a client with no read timeout holds
		// go-redis's lock, which Close waits for.
		for _, px := range append(append([]*redistest.Proxy(nil), f.Proxies...), mine.proxies...) {
			px.Cut()
		}
		for _, c := range mine.clients {
			_ = c.Close()
		}
	})
	return rl, mine
}

// queued waits until n calls of rl wait for key, queued, and each node
// that subscribedOn reads (Peek clients) has a subscriber to the release
// announcements (rl's, unless another Redlock on the node waits too): from
// then on, a release's announcements reach them (one sent before a
// subscription is lost, and costs a retry delay).
func queued(t *testing.T, rl *redlock.Redlock, key string, n int, subscribedOn ...*redis.Client) {
	t.Helper()
	require.Eventually(t, func() bool {
		if redlock.QueuedWaiters(rl, []string{key}) != n {
			return false
		}
		// rl's own subscriptions: another Redlock's (a holder's, listening
		// for its force release) count on the nodes too.
		if redlock.Listening(rl) < len(subscribedOn) {
			return false
		}
		for _, p := range subscribedOn {
			m, err := p.PubSubNumSub(context.Background(), redlock.ReleasedChannel).Result()
			if err != nil || m[redlock.ReleasedChannel] < 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "%d calls waiting for %s, queued, and a subscriber on %d nodes", n, key, len(subscribedOn))
}

// percentile returns the q-th quantile of ds (q 1: the greatest).
func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// warm takes and releases a lock, so that every pool has a connection.
func warm(t testing.TB, rl *redlock.Redlock) {
	t.Helper()
	l, err := rl.Acquire(context.Background(), []string{"{redlock}warm"}, time.Minute)
	require.NoError(t, err)
	_, err = l.Release(context.Background())
	require.NoError(t, err)
}

// acquireReaching runs acquire, an Acquire of key, while every node but i
// holds its writes (CLIENT PAUSE WRITE, on a straight connection) until
// node i holds key: the acquire's quorum then has node i, and a test that
// needs the lock on node i at a given moment (before the won acquire's
// later writes reach the other nodes) makes sure it is there. The node
// timeout must cover the pause (a few milliseconds, unless the machine is
// starved).
func acquireReaching(t testing.TB, f *fixture, i int, key string, acquire func() (*redlock.Lock, error)) *redlock.Lock {
	t.Helper()
	ctx := context.Background()
	for j, p := range f.Peek {
		if j != i {
			require.NoError(t, p.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err())
			t.Cleanup(func() { _ = p.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
		}
	}
	type acquired struct {
		l   *redlock.Lock
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := acquire()
		got <- acquired{l, err}
	}()
	require.Eventually(t, func() bool { return f.Peek[i].Exists(ctx, key).Val() == 1 }, 10*time.Second, time.Millisecond,
		"node %d runs the acquire of %s", i, key)
	for j, p := range f.Peek {
		if j != i {
			require.NoError(t, p.Do(ctx, "CLIENT", "UNPAUSE").Err())
		}
	}
	a := <-got
	require.NoError(t, a.err)
	require.Equal(t, a.l.Value(), f.Get(t, i, key), "node %d holds the lock", i)
	return a.l
}

// within returns a context that ends after d, to bound a call that must not
// hang; the test checks ctx.Err() to tell the bound from the call's own end.
func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// gone waits until key is missing on node i. A call returns once a quorum
// has answered, so the other nodes get their delete a moment later.
func (f *fixture) gone(t *testing.T, i int, key string) {
	t.Helper()
	assert.Eventually(t, func() bool {
		n, err := f.Peek[i].Exists(context.Background(), key).Result()
		return err == nil && n == 0
	}, 2*time.Second, time.Millisecond, "%s still on node %d", key, i)
}

// hook runs onCmd before every command a client sends, alone or in a
// pipeline, and onPipeline before every pipeline; either may be nil.
type hook struct {
	onCmd      func(redis.Cmder)
	onPipeline func([]redis.Cmder)
}

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.onCmd != nil {
			h.onCmd(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.onPipeline != nil {
			h.onPipeline(cmds)
		}
		if h.onCmd != nil {
			for _, c := range cmds {
				h.onCmd(c)
			}
		}
		return next(ctx, cmds)
	}
}

// countingHook counts every command a client sends.
func countingHook(n *atomic.Int32) hook {
	return hook{onCmd: func(redis.Cmder) { n.Add(1) }}
}

// spawn runs f in a goroutine counted by wg (sync.WaitGroup.Go, which needs
// Go 1.25; the module supports 1.24).
func spawn(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}

// lockKind is a kind of lock, by the options that ask for it.
type lockKind struct {
	name string
	opts []redlock.Option
}

// lockKinds are the kinds of lock a Using or an Acquire takes.
var lockKinds = []lockKind{
	{"plain", nil},
	{"fenced", []redlock.Option{redlock.WithFencing(true)}},
	{"permits", []redlock.Option{redlock.WithPermits(2)}},
	{"shared", []redlock.Option{redlock.WithShared(true)}},
	{"fair", []redlock.Option{redlock.WithFairQueue(true)}},
}

// roomy is a node timeout for a Redlock whose calls must reach every
// healthy node (an operator's ForceRelease, a read of every node) in a test
// that is not about the node timeout: the default 100ms is less than a
// loaded machine (the tests side by side, under -race) sometimes takes.
// Below the default extension threshold, so Using and terms still take it.
var roomy = redlock.WithNodeTimeout(400 * time.Millisecond)

// listening waits until rl's release subscriptions are confirmed on n
// nodes: a force release announced before a Redlock's first subscription is
// confirmed goes unheard (RELIABILITY.md, "Taking a lock back", limits), and
// on a loaded machine its set-up takes a while after the first lock.
func listening(t *testing.T, rl *redlock.Redlock, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return redlock.Listening(rl) >= n }, 10*time.Second, time.Millisecond,
		"the Redlock's release subscriptions confirmed on %d nodes", n)
}
