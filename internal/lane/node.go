package lane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/flight"
)

// Node is one member of the quorum: a client, and the lanes its calls take.
type Node struct {
	index  int
	addr   string // for people: never a password
	client redis.UniversalClient
	// scripts is what the lanes send through: client itself, or a fake a
	// test puts in its place (SetScripter).
	scripts Scripter
	// cluster is set for a Redis Cluster: a lane per shard.
	cluster *redis.ClusterClient
	// one is the lane of a node that is one server; on a Cluster, the lane
	// used until the Cluster's slot map is known (see Lane).
	one *Lane
	// ackOne is one's twin for the calls of locks that wait for replicas:
	// their batches end with a WAIT, which no plain call should wait
	// behind.
	ackOne *Lane

	mu     sync.Mutex
	shards map[string]*Lane // Cluster: by the shard primary's address (+ " acked")
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
}

// NewNode returns node index of a quorum, sending through c. Its workers
// and held calls are counted in owner; base is the node timeout, the least
// silence that opens a lane's breaker (a caller's shorter per-call timeout
// bounds only its own wait); servers is the quorum's record of which node is
// which server.
func NewNode(index int, c redis.UniversalClient, owner *flight.Flight, base time.Duration, servers *Servers) *Node {
	nd := &Node{index: index, addr: AddrOf(c), client: c, scripts: c, servers: servers, identify: identifies(c)}
	nd.cluster, _ = c.(*redis.ClusterClient)
	nd.one = &Lane{node: nd, owner: owner, base: base}
	nd.ackOne = &Lane{node: nd, owner: owner, base: base}
	return nd
}

// Index returns the node's index in its quorum.
func (nd *Node) Index() int { return nd.index }

// Addr returns the node's address, for people (see AddrOf).
func (nd *Node) Addr() string { return nd.addr }

// Client returns the node's client.
func (nd *Node) Client() redis.UniversalClient { return nd.client }

// Cluster returns the node's client when it is a Redis Cluster, or nil.
func (nd *Node) Cluster() *redis.ClusterClient { return nd.cluster }

// SetScripter makes the node's lanes send through s instead of its client
// (a fake, in tests). Call it before the first call.
func (nd *Node) SetScripter(s Scripter) { nd.scripts = s }

// Scripter returns what the node's lanes send through.
func (nd *Node) Scripter() Scripter { return nd.scripts }

// AddrOf names a node for people: its address, with the database when not 0;
// a Cluster's seeds; "sentinel failover group". Options hold no password in
// these fields.
func AddrOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Addr == "FailoverClient" { // go-redis's name: the master is found through the sentinels
			return "sentinel failover group"
		}
		if o.DB != 0 {
			return fmt.Sprintf("%s/%d", o.Addr, o.DB)
		}
		return o.Addr
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	return ""
}

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
// caller.
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
		l = &Lane{node: nd, owner: nd.one.owner, base: nd.one.base, shard: addr}
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
