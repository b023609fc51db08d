package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Setup says what Redis a test needs. The zero Setup is one independent node.
type Setup struct {
	// Nodes is how many redis-server processes to start: independent
	// nodes, or with Cluster the Cluster's primaries. Default 1; ignored
	// when On is set.
	Nodes int
	// On uses these running nodes instead of starting new ones.
	On []*Node
	// Proxied puts a fault-injecting Proxy in front of each independent
	// node; the clients talk to the proxies.
	Proxied bool
	// Cluster makes the nodes one Redis Cluster, reached through a single
	// ClusterClient (one member of a quorum).
	Cluster bool
	// Client is the options of each independent node's client (Addr is
	// set); ClusterClient those of the Cluster's client (Addrs is set).
	Client        *redis.Options
	ClusterClient *redis.ClusterOptions
}

// NoClientTimeouts leaves a client no timeouts or retries of its own, so that
// only the library's node timeout bounds a call to a node that hangs.
var NoClientTimeouts = &redis.Options{ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1}

// Fixture is the Redis side of one test: the nodes, the clients to build a
// Redlock on, and separate clients for the test's own reads.
type Fixture struct {
	Nodes []*Node
	// Proxies has one Proxy per node with Setup.Proxied, in node order.
	Proxies []*Proxy
	// Clients is what to give redlock.New: one *redis.Client per node, or
	// with Setup.Cluster one *redis.ClusterClient.
	Clients []redis.UniversalClient
	// Cluster is the ClusterClient with Setup.Cluster.
	Cluster *redis.ClusterClient
	// Peek has one client per node, straight to it (never through a proxy).
	Peek []*redis.Client
}

// New starts (or takes) the nodes that s describes and makes their clients,
// all stopped or closed when the test ends.
func New(tb testing.TB, s Setup) *Fixture {
	tb.Helper()
	f := &Fixture{Nodes: s.On}
	n := max(s.Nodes, 1)
	if f.Nodes == nil && s.Cluster {
		f.Nodes = StartCluster(tb, n)
	} else if f.Nodes == nil {
		f.Nodes = Start(tb, n)
	}
	for _, nd := range f.Nodes {
		f.Peek = append(f.Peek, nd.Client())
	}
	if s.Cluster {
		o := redis.ClusterOptions{}
		if s.ClusterClient != nil {
			o = *s.ClusterClient
		}
		o.Addrs = nil
		for _, nd := range f.Nodes {
			o.Addrs = append(o.Addrs, nd.Addr())
		}
		f.Cluster = redis.NewClusterClient(&o)
		tb.Cleanup(func() { _ = f.Cluster.Close() })
		f.Clients = []redis.UniversalClient{f.Cluster}
		return f
	}
	for _, nd := range f.Nodes {
		o := redis.Options{}
		if s.Client != nil {
			o = *s.Client
		}
		o.Addr = nd.Addr()
		// The client is closed after its proxy (cleanups run last first):
		// a connection set up through a hung proxy by a client with no
		// read timeout holds go-redis's lock until it is cut, and Close
		// waits for that lock (a CI run hung there for minutes).
		var c *redis.Client
		tb.Cleanup(func() {
			if c != nil {
				_ = c.Close()
			}
		})
		if s.Proxied {
			px := NewProxy(tb, nd.Addr())
			f.Proxies = append(f.Proxies, px)
			o.Addr = px.Addr()
		}
		c = redis.NewClient(&o)
		f.Clients = append(f.Clients, c)
	}
	return f
}

// Client returns node i's client, the one the Redlock uses (not with Cluster).
func (f *Fixture) Client(i int) *redis.Client { return f.Clients[i].(*redis.Client) }

// Get returns the value of key on node i, "" when it is missing.
func (f *Fixture) Get(tb testing.TB, i int, key string) string {
	tb.Helper()
	v, err := f.Peek[i].Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		tb.Fatalf("GET %s on node %d: %v", key, i, err)
	}
	return v
}

// PTTL returns key's remaining ttl on node i.
func (f *Fixture) PTTL(tb testing.TB, i int, key string) time.Duration {
	tb.Helper()
	d, err := f.Peek[i].PTTL(context.Background(), key).Result()
	if err != nil {
		tb.Fatalf("PTTL %s on node %d: %v", key, i, err)
	}
	return d
}

// Set sets key to value on node i, with ttl (0: none).
func (f *Fixture) Set(tb testing.TB, i int, key, value string, ttl time.Duration) {
	tb.Helper()
	if err := f.Peek[i].Set(context.Background(), key, value, ttl).Err(); err != nil {
		tb.Fatalf("SET %s on node %d: %v", key, i, err)
	}
}

// DBSize returns how many keys node i holds.
func (f *Fixture) DBSize(tb testing.TB, i int) int64 {
	tb.Helper()
	n, err := f.Peek[i].DBSize(context.Background()).Result()
	if err != nil {
		tb.Fatalf("DBSIZE on node %d: %v", i, err)
	}
	return n
}
