package redlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/dial"
)

// adminTimeout bounds Lose and Restart's own calls to the nodes, which
// are in-process and answer at once; it leaves room for a loaded machine.
const adminTimeout = 5 * time.Second

// Nodes is a set of independent in-memory Redis nodes on loopback, each
// behind a proxy that injects faults. Its methods are safe for concurrent
// use. A method that takes a node index i panics when i is out of [0, n),
// as a slice index does, and so do Down, Hang, Heal, Restart and Clients
// once Nodes is closed: both are mistakes in the test, not conditions it
// could handle. List and Addrs work after Close; Lose returns an error.
type Nodes struct {
	servers []*miniredis.Miniredis
	proxies []*proxy
	addrs   []string                // the proxies', which the users' clients dial
	clients []redis.UniversalClient // through the proxies, for Clients
	direct  []redis.UniversalClient // straight to the servers, past any fault
	admins  []*redlock.Redlock      // one per node over direct, for Lose

	closed    atomic.Bool
	closeOnce sync.Once
}

// Start starts n nodes (n >= 1), each a miniredis server behind its own
// proxy on 127.0.0.1, and returns them healthy. Keys with a ttl expire in
// real time. The caller calls [Nodes.Close] when done; in a test, [New]
// does both. Start returns an error for n < 1, and when a server or a
// proxy cannot listen on loopback.
func Start(n int) (*Nodes, error) {
	if n < 1 {
		return nil, fmt.Errorf("redlocktest: Start(%d): give the number of nodes, 1 or more (3 or 5 to keep a quorum through a fault)", n)
	}
	ns := &Nodes{}
	for range n {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			ns.Close()
			return nil, fmt.Errorf("redlocktest: Start(%d): starting a node: %w", n, err)
		}
		// miniredis counts a ttl down only when told; this makes it follow
		// the wall clock at every command, as a real server's does, so a
		// holder that never releases loses its lock after its ttl.
		mr.ClockTTL(true)
		ns.servers = append(ns.servers, mr)
		p, err := newProxy(mr.Addr())
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("redlocktest: Start(%d): %w", n, err)
		}
		ns.proxies = append(ns.proxies, p)
		ns.addrs = append(ns.addrs, p.addr)
		// A quiet dialer: go-redis would log each failed dial while the
		// node is Down.
		o := &redis.Options{Addr: p.addr}
		o.Dialer = dial.New(dial.Func(redis.NewDialer(o)), nil).Dial
		ns.clients = append(ns.clients, redis.NewClient(o))
		direct := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		ns.direct = append(ns.direct, direct)
		// One Redlock per node, so that Lose works on any number of nodes,
		// and a node timeout far above an in-process round
		// trip: Lose must reach every node even on a machine under load.
		admin, err := redlock.New([]redis.UniversalClient{direct}, redlock.WithNodeTimeout(time.Second))
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("redlocktest: Start(%d): %w", n, err)
		}
		ns.admins = append(ns.admins, admin)
	}
	return ns, nil
}

// New is [Start] for a test: it calls tb.Fatal when Start fails, and
// registers [Nodes.Close] with tb.Cleanup, so the nodes stop after the
// test's own cleanups (a Redlock closed with t.Cleanup or defer included).
func New(tb testing.TB, n int) *Nodes {
	tb.Helper()
	ns, err := Start(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Close)
	return ns
}

// Close stops the nodes: it closes the clients that [Nodes.Clients] made,
// the proxies (a connection open through one, to a hung node included, is
// cut) and the servers, and returns once every goroutine of the Nodes has
// ended. It does not wait for the nodes to answer anything, so it returns
// at once whatever the faults. Close is idempotent. Close a Redlock made
// over the nodes before, so that its releases reach them.
func (n *Nodes) Close() {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		// The proxies first: a go-redis client's Close waits for a
		// connection's handshake in progress, which a hung node would hold
		// up for the client's read timeout; cut, it fails at once.
		for _, p := range n.proxies {
			p.close()
		}
		for _, c := range n.clients {
			_ = c.Close()
		}
		for _, a := range n.admins {
			_ = a.Close() // nothing in flight: Lose waits for its calls
		}
		for _, c := range n.direct {
			_ = c.Close()
		}
		for _, mr := range n.servers {
			mr.Close()
		}
	})
}

// List returns the proxies' addresses, comma-separated
// ("127.0.0.1:p1,127.0.0.1:p2,..."): what [redlock.Open] takes, and the
// redlock command's --nodes flag and REDLOCK_NODES variable. A node keeps
// its address through every fault.
func (n *Nodes) List() string {
	return strings.Join(n.addrs, ",")
}

// Addrs returns the proxies' addresses, "127.0.0.1:port", node i's at i.
func (n *Nodes) Addrs() []string {
	return append([]string(nil), n.addrs...)
}

// Clients returns one *redis.Client per node, node i's at i, connected
// through its proxy with go-redis's default options, for [redlock.New].
// They are made by Start, the same
// ones at every call (a new slice each time), and closed by
// [Nodes.Close]: do not close them yourself. It panics after Close.
func (n *Nodes) Clients() []redis.UniversalClient {
	n.check("Clients()")
	return append([]redis.UniversalClient(nil), n.clients...)
}

// Down makes node i a crashed node: its open connections are cut and new
// ones are refused, until [Nodes.Heal]. Its data is kept (see
// [Nodes.Restart] for a node that loses it). It panics for i out of range
// and after Close.
func (n *Nodes) Down(i int) {
	n.set("Down", i, down)
}

// Hang makes node i a paused or partitioned node: it accepts connections
// and reads requests, but none reaches the node and nothing comes back,
// until [Nodes.Heal]. A call to it ends when the caller's timeout says so
// (redlock's [redlock.WithNodeTimeout], 100ms by default; the package doc
// says what else a hung node costs). It panics for i out of range and
// after Close.
func (n *Nodes) Hang(i int) {
	n.set("Hang", i, hung)
}

// Heal makes node i healthy again: a node that was down takes connections
// again, on the same address, and the connections opened while it hung are
// cut, as a healed partition's are (the client's calls on them timed out;
// it opens new ones). Healing a healthy node does nothing. It panics for i
// out of range and after Close, and in the unlikely case that another
// socket took a down node's port meanwhile.
func (n *Nodes) Heal(i int) {
	n.set("Heal", i, healthy)
}

// Restart makes node i lose every key and script, as a node restarted
// without persistence does, and cuts its open connections, as the restart
// would. A fault stays as it was: a node that is down comes back empty at
// Heal. It panics for i out of range and after Close, and if the node,
// which is in-process, does not answer within 5 seconds.
func (n *Nodes) Restart(i int) {
	what := fmt.Sprintf("Restart(%d)", i)
	n.check(what)
	n.index(what, i)
	n.proxies[i].cut()
	n.servers[i].FlushAll()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := n.direct[i].ScriptFlush(ctx).Err(); err != nil {
		panic(fmt.Sprintf("redlocktest: %s: SCRIPT FLUSH: %v", what, err))
	}
}

// Lose takes the lock on resource (any kind; an election's resource is
// "redlock:election:" + its name) from its holders on every node, whatever
// the faults: it is [redlock.Redlock.ForceRelease] over clients that reach
// the nodes past the proxies. The holder is told at once, or at its next
// extension (its Extend fails with [redlock.ErrLockExpired], Using's and a
// term's context ends). Call it once the holder holds the lock. It returns
// nil once the holders are removed, an error matching [redlock.ErrNotHeld]
// when no node held anything on resource, one matching
// [redlock.ErrInvalidArgument] for a resource redlock refuses, and an
// error after Close.
func (n *Nodes) Lose(resource string) error {
	if n.closed.Load() {
		return fmt.Errorf("redlocktest: Lose(%q) after Close", resource)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	held := false
	for _, a := range n.admins {
		insp, err := a.Inspect(ctx, resource)
		if err == nil && len(insp.Errors) > 0 {
			err = errors.Join(insp.Errors...)
		}
		if err != nil {
			return fmt.Errorf("redlocktest: Lose(%q): %w", resource, err)
		}
		held = held || len(insp.Holders) > 0
	}
	if !held {
		return fmt.Errorf("redlocktest: Lose(%q): %w: no node holds anything on %q (the name, or a lock already released or expired?)",
			resource, redlock.ErrNotHeld, resource)
	}
	var errs []error
	for i, a := range n.admins {
		if err := a.ForceRelease(ctx, resource); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redlocktest: Lose(%q): %w", resource, errors.Join(errs...))
	}
	return nil
}

// set switches node i's proxy to f, for Down, Hang and Heal.
func (n *Nodes) set(op string, i int, f fault) {
	what := fmt.Sprintf("%s(%d)", op, i)
	n.check(what)
	n.index(what, i)
	if err := n.proxies[i].set(f); err != nil {
		panic(fmt.Sprintf("redlocktest: %s: %v", what, err))
	}
}

// check panics when n is nil or closed: a fault or a client asked for
// where there are no nodes.
func (n *Nodes) check(what string) {
	if n == nil {
		panic("redlocktest: " + what + " on a nil *Nodes: use Start or New")
	}
	if n.closed.Load() {
		panic("redlocktest: " + what + " after Close")
	}
}

// index panics when i is not a node's index, in the words of a slice's
// bounds check.
func (n *Nodes) index(what string, i int) {
	if i < 0 || i >= len(n.proxies) {
		panic(fmt.Sprintf("redlocktest: %s: index out of range [%d] with %d nodes (0 to %d)", what, i, len(n.proxies), len(n.proxies)-1))
	}
}
