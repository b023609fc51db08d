package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/redistest"
)

// List: every holder and waiter on the nodes, whatever its kind, found
// with SCAN and read as Inspect reads it.

// nodeRedlockValue is a value as node-redlock writes it: 32 hex
// characters, no identity.
const nodeRedlockValue = "0123456789abcdef0123456789abcdef"

// entries lists pattern from another process's Redlock over f's nodes, and
// returns its entries by resource and role.
func entries(t *testing.T, f *fixture, pattern string) (*redlock.Listing, map[string][]redlock.Entry) {
	t.Helper()
	other, _ := ownRedlock(t, f, direct)
	l, err := other.List(context.Background(), pattern)
	require.NoError(t, err, "List(%q)", pattern)
	by := map[string][]redlock.Entry{}
	for _, e := range l.Entries() {
		by[e.Resource+" "+string(e.Role)] = append(by[e.Resource+" "+string(e.Role)], e)
	}
	return l, by
}

func TestListEveryKind(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithIdentity(job))
	ctx := context.Background()
	ttl := time.Minute
	_, err := f.rl.Acquire(ctx, []string{"plain"}, ttl)
	require.NoError(t, err)
	fenced, err := f.rl.Acquire(ctx, []string{"fenced"}, ttl, redlock.WithFencing(true))
	require.NoError(t, err)
	for range 2 {
		_, err = f.rl.Acquire(ctx, []string{"pool"}, ttl, redlock.WithPermits(3))
		require.NoError(t, err)
	}
	_, err = f.rl.Acquire(ctx, []string{"cfg"}, ttl, redlock.WithShared(true))
	require.NoError(t, err)
	_, err = f.rl.Acquire(ctx, []string{"fifo"}, ttl, redlock.WithFairQueue(true))
	require.NoError(t, err)
	term, err := f.rl.Election("sched").Campaign(ctx, "candidate-1", ttl)
	require.NoError(t, err)
	for i := range f.Nodes {
		f.Set(t, i, "node-redlock", nodeRedlockValue, ttl) // node-redlock's SET key value PX
		f.Set(t, i, "not-a-lock", "some application's string", ttl)
		f.Set(t, i, "gone", "redlock:gone", ttl) // a tombstone: free
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	waiter, _ := ownRedlock(t, f, direct, redlock.WithFairQueue(true), redlock.WithIdentity("waiter A"))
	spawn(&wg, func() {
		_, _ = waiter.Acquire(wctx, []string{"fifo"}, ttl, redlock.WithRetryCount(-1), redlock.WithRetryDelay(50*time.Millisecond))
	})
	queuedOnNodes(t, f, "fifo", 1)

	var l *redlock.Listing
	var by map[string][]redlock.Entry
	require.Eventually(t, func() bool { // Acquire returns at a quorum; the third node's write lands after
		l, by = entries(t, f, "")
		for _, e := range l.Entries() {
			if e.Nodes != 3 {
				return false
			}
		}
		return len(l.Entries()) == 9
	}, 5*time.Second, 10*time.Millisecond, "every holder on every node: %+v", by)
	t.Logf("List(\"\") = %d resources, %d entries; nodes %+v", len(l.Resources), len(l.Entries()), l.Nodes)
	assert.True(t, l.Complete())
	assert.Equal(t, "*", l.Pattern)
	for _, n := range l.Nodes {
		assert.NoError(t, n.Err, "node %d", n.Node)
		assert.Positive(t, n.Keys)
	}
	check := func(key string, n int, kind redlock.Kind, identity string) []redlock.Entry {
		t.Helper()
		es := by[key]
		require.Len(t, es, n, "entries of %s: %+v", key, by)
		for _, e := range es {
			assert.Equal(t, kind, e.Kind, key)
			assert.Equal(t, identity, e.Identity, key)
			assert.Equal(t, redlock.EntryHeld, e.State, key)
			assert.True(t, e.OnQuorum, key)
			if e.Role != redlock.RoleWaiter {
				assert.Greater(t, e.TTL, 50*time.Second, key)
			}
		}
		return es
	}
	check("plain lock", 1, redlock.KindLock, job)
	assert.Equal(t, fenced.Token(), check("fenced lock", 1, redlock.KindLock, job)[0].Token)
	permits := check("pool permit", 2, redlock.KindSemaphore, job)
	assert.NotEqual(t, permits[0].Permit, permits[1].Permit, "two permits")
	check("cfg reader", 1, redlock.KindShared, job)
	check("fifo lock", 1, redlock.KindLock, job)
	check("fifo waiter", 1, redlock.KindLock, "waiter A")
	assert.Equal(t, term.Number(), check("redlock:election:sched term", 1, redlock.KindElection, job)[0].Token)
	nr := check("node-redlock lock", 1, redlock.KindLock, "")
	assert.Equal(t, nodeRedlockValue, nr[0].Value, "node-redlock's lock, with no identity")
	assert.NotContains(t, by, "not-a-lock lock", "a string that is no lock value")
	assert.NotContains(t, by, "gone lock", "a tombstone")
	var names []string
	for _, in := range l.Resources {
		names = append(names, in.Resource)
	}
	assert.IsNonDecreasing(t, names, "by name")
}

// A pattern keeps the resources it matches; "" and "*" are all; a bad
// pattern or option is refused before anything is sent.
func TestListPattern(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	for _, r := range []string{"job:1", "job:2", "cache"} {
		_, err := f.rl.Acquire(ctx, []string{r}, time.Minute)
		require.NoError(t, err)
	}
	for pattern, want := range map[string]int{"job:*": 2, "job:[1]": 1, "": 3, "*": 3, "nothing*": 0, `job\:1`: 1} {
		l, err := f.rl.List(ctx, pattern)
		require.NoError(t, err, "List(%q)", pattern)
		assert.Len(t, l.Resources, want, "List(%q)", pattern)
	}
	for _, bad := range []string{"job[", `job\`, "redlock:permit:*", "redlock:fence:*", "redlock:queue:{x}:*"} {
		_, err := f.rl.List(ctx, bad)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "List(%q)", bad)
		t.Logf("List(%q): %v", bad, err)
	}
	_, err := f.rl.List(ctx, "", redlock.WithListTimeout(0))
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	_, err = f.rl.List(ctx, "", redlock.WithListMaxKeys(-1))
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	for i := range f.Nodes { // enough keys that SCAN pages them
		for j := range 200 {
			f.Set(t, i, fmt.Sprintf("bulk:%d", j), nodeRedlockValue, time.Minute)
		}
	}
	l, err := f.rl.List(ctx, "", redlock.WithListMaxKeys(10))
	require.NoError(t, err)
	for _, n := range l.Nodes {
		if assert.Error(t, n.Err) {
			assert.Regexp(t, `cut at WithListMaxKeys\(10\) after \d+ keys`, n.Err.Error())
		}
	}
	assert.False(t, l.Complete())
	rl, err := redlock.New(f.Clients)
	require.NoError(t, err)
	require.NoError(t, rl.Close())
	_, err = rl.List(ctx, "")
	assert.ErrorIs(t, err, redlock.ErrClosed)
}

// A node that does not answer is named, within the bound; what a quorum
// holds is still listed held, and with two of three silent, unknown.
func TestListSilentNode(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()
	l, err := f.rl.Acquire(ctx, []string{"held"}, time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.Get(t, 2, "held") == l.Value() }, 5*time.Second, 5*time.Millisecond)
	f.Nodes[2].Pause()
	defer f.Nodes[2].Resume()
	start := time.Now()
	got, err := f.rl.List(ctx, "", redlock.WithListTimeout(2*time.Second))
	took := time.Since(start)
	require.NoError(t, err)
	t.Logf("List with node 2 paused: %v; node 2: %v", took, got.Nodes[2].Err)
	assert.Less(t, took, 2*time.Second+500*time.Millisecond, "within the bound")
	assert.Error(t, got.Nodes[2].Err)
	var ne *redlock.NodeError
	assert.ErrorAs(t, got.Nodes[2].Err, &ne)
	assert.True(t, got.Complete(), "one of three unscanned: every lock on a quorum is found")
	es := got.Entries()
	require.Len(t, es, 1)
	assert.Equal(t, redlock.EntryHeld, es[0].State)
	assert.Equal(t, 2, es[0].Nodes)

	f.Nodes[1].Pause()
	defer f.Nodes[1].Resume()
	got, err = f.rl.List(ctx, "", redlock.WithListTimeout(2*time.Second))
	require.NoError(t, err)
	assert.False(t, got.Complete(), "two of three unscanned")
	es = got.Entries()
	require.Len(t, es, 1)
	assert.Equal(t, redlock.EntryUnknown, es[0].State)
}

// A Redis Cluster node is not scanned, and List says so.
func TestListCluster(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.Setup{Nodes: 3, Cluster: true})
	_, err := f.rl.Acquire(context.Background(), []string{"c"}, time.Minute)
	require.NoError(t, err)
	l, err := f.rl.List(context.Background(), "")
	require.NoError(t, err)
	require.Len(t, l.Nodes, 1)
	require.Error(t, l.Nodes[0].Err)
	assert.Contains(t, l.Nodes[0].Err.Error(), "a Redis Cluster is not scanned (SCAN reads one server): locks held only on node 0")
	assert.False(t, l.Complete())
}

// countingNode counts a node's round trips (Do calls) and commands.
type countingNode struct {
	driver.Node
	trips, cmds atomic.Int64
}

func (c *countingNode) Do(ctx context.Context, cmds []*driver.Cmd) {
	c.trips.Add(1)
	c.cmds.Add(int64(len(cmds)))
	c.Node.Do(ctx, cmds)
}

// The measurement: List of 10,000 locks held on 3 local nodes, its time
// and what it reads of each node (RELIABILITY.md quotes it).
// Not parallel: it is the figure RELIABILITY.md quotes, measured without
// the package's other tests beside it.
func TestListTenThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 locks")
	}
	const n = 10_000
	f := newNodes(t, 3)
	ctx := context.Background()
	for i := range f.Nodes {
		p := f.Peek[i].Pipeline()
		for j := range n {
			p.Set(ctx, fmt.Sprintf("job:%05d", j), fmt.Sprintf("%032x@worker-%d", j, j%10), time.Hour)
		}
		_, err := p.Exec(ctx)
		require.NoError(t, err)
	}
	var counted []*countingNode
	var nodes []driver.Node
	for _, c := range f.Clients {
		cn := &countingNode{Node: driver.GoRedis(c)}
		counted, nodes = append(counted, cn), append(nodes, cn)
	}
	rl, err := redlock.NewFromNodes(nodes)
	require.NoError(t, err)
	defer rl.Close()
	warm(t, rl)
	for i := range counted {
		counted[i].trips.Store(0)
		counted[i].cmds.Store(0)
	}
	start := time.Now()
	l, err := rl.List(ctx, "", redlock.WithListTimeout(time.Minute))
	took := time.Since(start)
	require.NoError(t, err)
	assert.True(t, l.Complete())
	assert.Len(t, l.Resources, n)
	assert.Len(t, l.Entries(), n)
	t.Logf("List of %d locks on 3 nodes: %v", n, took)
	for i, ns := range l.Nodes {
		t.Logf("node %d: %d keys scanned in %d pages, %d resources read; %d round trips, %d commands", i, ns.Keys, ns.Pages, ns.Reads, counted[i].trips.Load(), counted[i].cmds.Load())
	}
}
