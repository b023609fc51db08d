package redlock

import (
	"reflect"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/wake"
)

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
	return r, nil
}
