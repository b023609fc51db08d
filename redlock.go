package redlock

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/dial"
	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/wake"
)

// Redlock runs the Redlock algorithm over N independent Redis nodes: a lock
// is held when a majority (quorum n/2+1) of nodes hold its random value.
//
// A Redlock is safe for concurrent use by multiple goroutines and must not
// be copied. New starts no goroutine. Each node has at most one worker
// sending its calls, plus at most 4 parked on it while it does not answer
// (see [WithNodeTimeout]); they end when the node answers. The subscriptions that
// wake waiting Acquires (one goroutine per node, started by the first
// Acquire that waits) end with [Redlock.Close]. It does not own the clients
// given to New: closing them is the caller's job ([Open]'s are its own).
type Redlock struct {
	quorum   // the nodes, and the attempt that runs on them all
	cfg      *config
	wake     *wake.Waker             // waiting Acquires and the subscriptions that wake them, see WithWakeOnRelease
	workers  flight.Flight           // every node worker and held release (see internal/lane)
	servers  lane.Servers            // which node is which server
	terms    termSet                 // the live terms of its elections, which Close resigns
	owned    []redis.UniversalClient // the clients Open made, which Close closes
	closed   atomic.Bool             // set by Close: a call that takes something new is refused (see open)
	closing  sync.Once               // Close's work (see close)
	closeErr error                   // what it returned
}

// New returns a Redlock over clients, one per independent Redis node (a
// Client, a FailoverClient or a ClusterClient; on a Cluster, a
// multi-resource lock needs its resources in one hash slot: "{orders}:1").
// Any number of nodes from 1 is taken (the package doc's "How many nodes").
// opts become the defaults of every call. New sends nothing to Redis.
//
// New returns an error matching [ErrInvalidArgument] when clients is empty,
// holds a nil client, a *redis.Ring, the same client or address twice, or
// an option is out of range. One server reached by two names is found at
// its first answers (its run_id), and its later node votes against.
func New(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	if len(clients) == 0 {
		return nil, invalid("no clients: a Redlock needs at least one Redis client")
	}
	for i, c := range clients {
		if isNil(c) {
			return nil, invalid("clients[%d] is nil: give a client made by redis.NewClient, NewFailoverClient or NewClusterClient", i)
		}
		// The same client twice would let one node vote twice.
		for j := range i {
			if clients[j] == c {
				return nil, invalid("clients[%d] is the same client as clients[%d]", i, j)
			}
		}
		if err := notRing(c, "clients", i); err != nil {
			return nil, err
		}
	}
	if err := distinctServers(clients); err != nil {
		return nil, err
	}
	nodes := make([]driver.Node, len(clients))
	for i, c := range clients {
		nodes[i] = driver.GoRedis(c)
	}
	return newRedlock(nodes, opts)
}

// NewFromNodes returns a Redlock over nodes of any Redis client, one per
// independent Redis node: go-redis's through [driver.GoRedis], rueidis's
// and valkey-go's through the modules redlockrueidis and redlockvalkey, or
// a [driver.Node] of your own; one quorum may mix them. It refuses what
// [New] refuses, naming nodes[i]. Only go-redis's clients get a connection
// set up before the first call, a lane per Cluster shard, and the check of
// the ReadTimeout against WithReplicaAck's wait.
func NewFromNodes(nodes []driver.Node, opts ...Option) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, invalid("no nodes: a Redlock needs at least one Redis node")
	}
	seen := map[string]int{}
	for i, n := range nodes {
		if isNil(n) {
			return nil, invalid("nodes[%d] is nil: give a node made by an adapter (redlockrueidis.Node or .Dial, redlockvalkey.Node or .Dial: Dial when the server may be down at start) or driver.GoRedis", i)
		}
		for j := range i {
			if same(nodes[j], n) {
				return nil, invalid("nodes[%d] is the same node as nodes[%d]", i, j)
			}
		}
		if c, ok := driver.GoRedisClient(n); ok {
			if err := notRing(c, "nodes", i); err != nil {
				return nil, err
			}
		}
		// One server, or one Cluster through two clients (go-redis names
		// its seeds, rueidis the nodes it found): any address shared.
		for _, a := range n.Info().Servers {
			if j, ok := seen[a]; ok && j != i {
				return nil, invalid("nodes[%d] and nodes[%d] talk to the same server (%s), which would vote twice: "+
					"give each independent node once", j, i, a)
			}
			seen[a] = i
		}
	}
	return newRedlock(nodes, opts)
}

// Open returns a Redlock over the nodes of list (see [ParseNodes]), with a
// *redis.Client for each that [Redlock.Close] closes. opts are New's:
//
//	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES")) // 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
//
// It connects to no node. Its clients make go-redis log nothing of a node
// that refuses connections: [WithErrorHandler] and the observer's Connection
// hear of it once (and the observer of its return); a refusing node is
// dialed again a second later at the earliest. Open returns ParseNodes's
// and New's errors.
func Open(list string, opts ...Option) (*Redlock, error) {
	parsed, err := ParseNodes(list)
	if err != nil {
		return nil, err
	}
	def := defaultConfig()
	cfg, err := with(&def, opts)
	if err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, len(parsed))
	var made atomic.Pointer[Redlock] // set once New returned; a dial before reports nothing
	for i, o := range parsed {
		// The client's dial outlasts the node timeout, so that the
		// Redlock's timeout is the one that decides.
		o.DialTimeout = max(o.DialTimeout, 2*cfg.nodeTimeout)
		o.Dialer = dial.New(dial.Func(redis.NewDialer(o)), func(up bool, err error) {
			if r := made.Load(); r != nil {
				r.connection(i, up, err)
			}
		}).Dial
		clients[i] = redis.NewClient(o)
	}
	r, err := New(clients, opts...)
	if err != nil {
		closeAll(clients)
		return nil, err
	}
	r.owned = clients
	made.Store(r)
	return r, nil
}

// Nodes returns the number of nodes (the membership size).
func (r *Redlock) Nodes() int {
	if r == nil {
		return 0
	}
	return r.size()
}

// Quorum returns how many nodes must vote for an operation: n/2+1.
func (r *Redlock) Quorum() int {
	if r == nil {
		return 0
	}
	return r.needed()
}

// closeWait is the longest Close waits for what is still in flight, unless
// two node timeouts are longer.
const closeWait = time.Second

// Close ends the Redlock: it resigns its live terms, ends its subscriptions,
// sends at once the releases held for silent nodes, waits for them and the
// calls in flight (at most a second, or two node timeouts), then closes the
// clients that [Open] made. After Close, every call that takes something
// new returns [ErrClosed] at once, sending nothing; Extend and Release of
// the locks taken before are still sent. Close is idempotent and safe for
// concurrent use (every call returns once the first has, with its result);
// it returns an error when something still waited for a silent node, and
// leaves no goroutine behind.
func (r *Redlock) Close() error {
	if r == nil || r.wake == nil { // nil, or not made by New
		return nil
	}
	// A second call waits for the first (it returned nil at once while the
	// first still waited for a silent node).
	r.closing.Do(func() { r.closeErr = r.close() })
	return r.closeErr
}

// close is Close's work, done once.
func (r *Redlock) close() error {
	r.closed.Store(true) // nothing new from here on: what Close waits for only ends
	// One deadline for everything Close waits for, its terms included.
	wait := max(closeWait, 2*r.cfg.nodeTimeout)
	deadline := time.Now().Add(wait)
	// Terms end first: their contexts, then their releases.
	r.terms.close(deadline)
	// The waiters wake at once, and end with ErrClosed (see execute).
	subs, first := r.wake.Close()
	if !first {
		return nil
	}
	// Held releases go out now, past their breakers: the node may have
	// come back since their last try.
	for _, nd := range r.nodes {
		nd.Flush()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for _, g := range []struct {
		f    *flight.Flight
		what string
	}{{subs, "a subscription is still connecting to"}, {&r.workers, "a call or a release is still waiting for"}} {
		select {
		case <-g.f.Wait():
		case <-t.C:
			r.workers.Stop()
			closeAll(r.owned)
			return fmt.Errorf("redlock: close: %s a node that has not answered after %v; a call ends when the client's "+
				"read times out or the client is closed, and a release not sent by then is given up", g.what, wait)
		}
	}
	r.workers.Stop()
	closeAll(r.owned)
	return nil
}

// notRing refuses a *redis.Ring: go-redis sends a script to the shard of
// its first key, so a lock on [x y] and one on [y x] would run on
// different shards, and both succeed.
func notRing(c redis.UniversalClient, list string, i int) error {
	if _, ok := c.(*redis.Ring); ok {
		return invalid("%s[%d] is a *redis.Ring, which routes a script by its first key only, so two locks "+
			"sharing a resource can both succeed on different shards: give each shard as its own *redis.Client node, "+
			"or use a Redis Cluster (ClusterClient) with hash-tagged resources", list, i)
	}
	return nil
}

// same reports whether a and b are one node: equal, when their type can be
// compared (a Node of a user's may be a struct that cannot).
func same(a, b driver.Node) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// What New refuses before anything is sent, with an error matching
// ErrInvalidArgument that names the bad value and what to do (a call's
// settings, ttl and resources are options.go's; ready, open and owns,
// below, are every call's door).

// distinctServers refuses two clients for one server: two *redis.Client
// with the same address (whatever their databases: several databases of
// one server are one server), or two ClusterClients that share a seed
// address. Other names of one server are found at first contact
// (internal/lane's identity.go). That node would vote twice. (A FailoverClient's address is
// resolved through its sentinels at run time, so it is not compared.)
func distinctServers(clients []redis.UniversalClient) error {
	seen := map[string]int{}
	for i, c := range clients {
		var ids []string
		switch c := c.(type) {
		case *redis.Client:
			if o := c.Options(); o.Addr != "FailoverClient" {
				ids = append(ids, o.Addr) // any database: one server votes once
			}
		case *redis.ClusterClient:
			for _, a := range c.Options().Addrs {
				ids = append(ids, "cluster "+a)
			}
		}
		for _, id := range ids {
			if j, ok := seen[id]; ok && j != i {
				return invalid("clients[%d] and clients[%d] talk to the same server (%s), which would vote twice: "+
					"give each independent node once", j, i, id)
			}
			seen[id] = i
		}
	}
	return nil
}

// isNil reports whether c is nil or an interface holding a nil pointer.
func isNil(c any) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// newRedlock returns a Redlock over nodes, which the caller checked.
func newRedlock(nodes []driver.Node, opts []Option) (*Redlock, error) {
	def := defaultConfig()
	cfg, err := with(&def, opts)
	if err != nil {
		return nil, err
	}
	r := &Redlock{cfg: cfg}
	r.nodes = make([]*lane.Node, len(nodes))
	for i, n := range nodes {
		r.nodes[i] = lane.NewNode(i, n, &r.workers, cfg.nodeTimeout, &r.servers)
	}
	r.wake = wake.New(announcers(r.nodes), valueLen, script.HandedPrefix)
	for _, nd := range r.nodes {
		nd.OnRecover(r.wake.Recovered)
	}
	return r, nil
}

// closeAll closes clients, whose errors (a client already closed) say
// nothing the caller can act on.
func closeAll(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// OpConnect is the operation of a [NodeError] that says a node of a
// Redlock made by [Open] stopped accepting connections.
const OpConnect Op = "connect"

// connection reports that node i, one of Open's, stopped (up false, with
// the dial's error) or started accepting connections: to the observer's
// Connection hook, and a stop to the error handler too. Go-redis logs
// nothing of it (internal/dial).
func (r *Redlock) connection(i int, up bool, err error) {
	addr := r.nodes[i].Addr()
	if !up && r.cfg.onError != nil {
		r.cfg.onError(&NodeError{Node: i, Addr: addr, Op: OpConnect, Err: err})
	}
	if r.cfg.observer != nil {
		safely(r.cfg.observer.Connection, ConnectionInfo{Node: i, Addr: addr, Up: up, Err: err})
	}
}

// ready refuses a nil Redlock, one not made by New, and a nil ctx.
func (r *Redlock) ready(ctx context.Context) error {
	if r == nil || r.cfg == nil {
		return invalid("nil or zero Redlock: make one with New")
	}
	if ctx == nil {
		return invalid("nil context: pass context.Background() or a request's context")
	}
	return nil
}

// open is ready for a call that takes something new (a lock, a term, a
// read or a take-back of another's): once the Redlock is closed it refuses
// the call, named by call (and resources, when given), with an error
// matching ErrClosed, before anything is sent. Extend and Release of what
// a caller holds go through owns instead, and are still sent (see Close).
func (r *Redlock) open(ctx context.Context, call string, resources []string) error {
	if err := r.ready(ctx); err != nil {
		return err
	}
	if r.closed.Load() {
		if resources != nil {
			call = fmt.Sprintf("%s %q", call, resources)
		}
		return fmt.Errorf("%w: %s: not sent; after Close only the Extend and Release of locks taken before it are sent", ErrClosed, call)
	}
	return nil
}

// owns refuses a nil Lock, a zero Lock, and a Lock acquired through another
// Redlock.
func (r *Redlock) owns(ctx context.Context, lock *Lock) error {
	if err := r.ready(ctx); err != nil {
		return err
	}
	switch {
	case lock == nil:
		return invalid("nil lock")
	case lock.redlock == nil:
		return invalid("zero Lock: locks come from Acquire or Extend")
	case lock.redlock != r:
		return invalid("the lock was acquired through another Redlock")
	}
	return nil
}

// kept names, for door's errors, what extends a lock for as long as it
// runs (Using, a term) and what happens when an extension is late.
type kept struct{ who, late string }

// door is the one check of a call's input that every call taking or
// extending a lock makes (Acquire, Extend, Using, Campaign): the resources
// the caller gave (gave false: a lock's own, an election's key, not checked
// again), the ttl, the extension threshold when the lock is kept while
// something runs (k; nil: not), and the replica wait its nodes' clients
// allow. It returns an error matching ErrInvalidArgument.
func (r *Redlock) door(cfg *config, resources []string, gave bool, ttl time.Duration, k *kept) error {
	if gave {
		if err := validateResources(resources); err != nil {
			return err
		}
	}
	if err := validateTTL(ttl, cfg); err != nil {
		return err
	}
	if k != nil {
		// node-redlock's rule: the lock must outlive the threshold by
		// 100ms, or it would need extending before fn could do anything.
		// (Written so that no sum can overflow.)
		if ttl-100*time.Millisecond < cfg.extensionThreshold {
			return invalid("ttl %v is less than the automatic extension threshold %v + 100ms: give %s a longer ttl, or lower WithAutomaticExtensionThreshold", ttl, cfg.extensionThreshold, k.who)
		}
		// An extension may wait a whole node timeout for its quorum.
		if cfg.extensionThreshold < cfg.nodeTimeout {
			return invalid("automatic extension threshold %v is below the node timeout %v: %s while an "+
				"extension waits for its quorum; raise WithAutomaticExtensionThreshold or lower WithNodeTimeout", cfg.extensionThreshold, cfg.nodeTimeout, k.late)
		}
	}
	return checkAck(r.nodes, cfg)
}
