package lane

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/flight"
)

// Node is one member of the quorum: a client, and the lanes its calls take.
type Node struct {
	index int
	addr  string // for people: never a password
	// native is the node as it was given; client is its go-redis client,
	// nil for another client's (see driver.GoRedis).
	native driver.Node
	client redis.UniversalClient
	// conn is what the lanes send through: native, or a fake a test puts
	// in its place (SetConn).
	conn driver.Node
	// isCluster is set for a Redis Cluster; cluster too when it is
	// go-redis's: a lane per shard (another client's Cluster has the
	// node's two lanes).
	isCluster bool
	cluster   *redis.ClusterClient
	// one is the lane of a node that is one server; on a Cluster, the lane
	// used until the Cluster's slot map is known (see Lane).
	one *Lane
	// ackOne is one's twin for the calls of locks that wait for replicas:
	// their batches end with a WAIT, which no plain call should wait
	// behind.
	ackOne *Lane

	mu     sync.Mutex
	shards map[string]*Lane // go-redis's Cluster: by the shard primary's address (+ " acked")
	mapped atomic.Bool      // Cluster: a call has been answered, so the slot map is loaded

	// Which server it is (identity.go): servers is the record shared by the
	// nodes of one quorum; identify is set for a node that asks its
	// server's run_id, until it has, then again each IdentityEvery
	// (askedAt: when its server last answered the question); twin is set
	// while another node is the same server.
	servers  *Servers
	identify bool
	askedAt  atomic.Int64 // Unix nanoseconds; 0 before the first answer
	twin     atomic.Pointer[TwinError]

	// onRecover, when not nil, is called when a lane of the node hears the
	// node again after trouble (see Lane.troubled). Set before any call.
	onRecover func()
}

// NewNode returns node index of a quorum, sending through n. Its workers
// and held calls are counted in owner; base is the node timeout, the least
// silence that opens a lane's breaker (a caller's shorter per-call timeout
// bounds only its own wait); servers is the quorum's record of which node is
// which server.
func NewNode(index int, n driver.Node, owner *flight.Flight, base time.Duration, servers *Servers) *Node {
	info := n.Info()
	nd := &Node{index: index, addr: info.Addr, native: n, conn: n, servers: servers, identify: info.OneServer, isCluster: info.Cluster}
	nd.client, _ = driver.GoRedisClient(n)
	nd.cluster, _ = nd.client.(*redis.ClusterClient)
	nd.one = makeLane(nd, owner, base, "")
	nd.ackOne = makeLane(nd, owner, base, "")
	return nd
}

// OnRecover has f called (on a lane's worker, outside its lock) each time
// a lane of the node hears from the node after its breaker opened, a
// connection's set-up outlasted its wait, or the client met a network
// error: a caller whose attempt missed the node may try again. Call it
// before any call is sent.
func (nd *Node) OnRecover(f func()) { nd.onRecover = f }

// Index returns the node's index in its quorum.
func (nd *Node) Index() int { return nd.index }

// Addr returns the node's address, for people (driver.Info's Addr).
func (nd *Node) Addr() string { return nd.addr }

// Client returns the node's go-redis client, or nil when it has another.
func (nd *Node) Client() redis.UniversalClient { return nd.client }

// IsCluster reports whether the node is a Redis Cluster.
func (nd *Node) IsCluster() bool { return nd.isCluster }

// Subscribe subscribes to channel on the node (see driver.Node).
func (nd *Node) Subscribe(ctx context.Context, channel string, sharded bool) driver.Subscription {
	return nd.native.Subscribe(ctx, channel, sharded)
}

// SetConn makes the node's lanes send through c instead of its client (a
// fake, in tests). Call it before the first call.
func (nd *Node) SetConn(c driver.Node) { nd.conn = c }

// Conn returns what the node's lanes send through.
func (nd *Node) Conn() driver.Node { return nd.conn }

// Lanes returns the node's lanes.
func (nd *Node) Lanes() []*Lane {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	ls := []*Lane{nd.one, nd.ackOne}
	for _, l := range nd.shards {
		ls = append(ls, l)
	}
	return ls
}

// Flush sends every held release of every lane now, past the breakers.
func (nd *Node) Flush() {
	for _, l := range nd.Lanes() {
		l.flush()
	}
}

// Lane returns the lane that serves key, for a lock that waits for replicas
// (acked) or not: a lock's calls all take the same lane, so that a release
// never overtakes its lock's acquire on a node. On a Cluster it is the lane
// of the shard primary that owns key's slot; before the Cluster client has
// loaded its slot map (which it does on its first command, in a worker), it
// is the node's own lane, so that looking the shard up never blocks the
// caller. Another client's Cluster routes each call itself, on the node's
// own lanes (its batches that wait for replicas send a WAIT per slot: see
// runBatch).
func (nd *Node) Lane(key string, acked bool) *Lane {
	own := nd.one
	if acked {
		own = nd.ackOne
	}
	if nd.cluster == nil || !nd.mapped.Load() {
		return own
	}
	// With the slot map loaded this does not touch the network.
	c, err := nd.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		return own
	}
	addr := c.Options().Addr
	id := addr
	if acked {
		id += " acked"
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	l := nd.shards[id]
	if l == nil {
		if nd.shards == nil {
			nd.shards = map[string]*Lane{}
		}
		l = makeLane(nd, nd.one.owner, nd.one.base, addr)
		nd.shards[id] = l
	}
	return l
}

// asking reports whether the node's next round asks its server's run_id:
// until the server has answered it, and again each IdentityEvery (a server
// restarted has a new run_id). Every round sent before the first answer
// asks, so that no call of this node is judged before its identity is.
func (nd *Node) asking() bool {
	if !nd.identify {
		return false
	}
	at := nd.askedAt.Load()
	return at == 0 || time.Since(time.Unix(0, at)) > IdentityEvery
}
