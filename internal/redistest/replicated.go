package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCluster is a real Redis Cluster whose primaries have one replica
// each. As in a SentinelGroup, every node announces the address of a Link
// proxy in front of it, so replication goes through the links (and can be
// delayed with SetReplicationLag) while the test's clients, through
// ClientOptions, reach the nodes directly.
type ReplicatedCluster struct {
	tb    testing.TB
	Nodes []*Node
	Links []*Proxy // Links[i] is in front of Nodes[i]
}

// StartReplicatedCluster starts primaries primaries and a replica for each,
// creates the Cluster, and waits until every node sees it whole.
func StartReplicatedCluster(tb testing.TB, primaries int) *ReplicatedCluster {
	tb.Helper()
	Require(tb)
	if _, err := exec.LookPath(CLI); err != nil {
		tb.Fatalf("redistest: redis-cli is needed to create a cluster: %v", err)
	}
	c := &ReplicatedCluster{tb: tb}
	ctx := context.Background()
	args := []string{"--cluster", "create"}
	old := !Version(tb).AtLeast(7, 0)
	for range 2 * primaries {
		nd := startNode(tb, true)
		link := NewProxy(tb, nd.Addr())
		c.Nodes, c.Links = append(c.Nodes, nd), append(c.Links, link)
		cl := nd.Client()
		for k, v := range map[string]string{"cluster-announce-ip": "127.0.0.1", "cluster-announce-port": linkPort(link),
			"cluster-announce-bus-port": strconv.Itoa(nd.bus), "repl-diskless-sync-delay": "0"} {
			if err := cl.ConfigSet(ctx, k, v).Err(); err != nil {
				tb.Fatalf("redistest: CONFIG SET %s: %v", k, err)
			}
		}
		_ = cl.Close()
		args = append(args, link.Addr())
		if !old {
			continue
		}
		// Redis 6.2's CLUSTER MEET reaches a node's bus at the port it is
		// given plus 10000, which is not the link's bus: redis-cli meets
		// the nodes directly (they still announce their links, so
		// replication goes through them).
		args[len(args)-1] = nd.Addr()
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(CLI, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	c.waitWhole(30 * time.Second)
	return c
}

// ClientOptions returns ClusterClient options whose dialer reaches the
// nodes directly, past their links.
func (c *ReplicatedCluster) ClientOptions() *redis.ClusterOptions {
	direct := map[string]string{}
	var addrs []string
	for i, l := range c.Links {
		direct[l.Addr()] = c.Nodes[i].Addr()
		addrs = append(addrs, l.Addr())
	}
	d := &net.Dialer{Timeout: time.Second}
	return &redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if a, ok := direct[addr]; ok {
				addr = a
			}
			return d.DialContext(ctx, network, addr)
		},
	}
}

// Client returns a ClusterClient (see ClientOptions), closed when the test
// ends.
func (c *ReplicatedCluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(c.ClientOptions())
	c.tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// SetReplicationLag delays what each node sends through its link: the
// replication stream to its replica.
func (c *ReplicatedCluster) SetReplicationLag(d time.Duration) {
	for _, l := range c.Links {
		l.SetLatency(0, d)
	}
}

// index returns the node whose link, or which itself, has port (a Cluster
// that redis-cli met directly, on Redis 6.2, can show a node at its own).
func (c *ReplicatedCluster) index(port string) int {
	for i, l := range c.Links {
		if linkPort(l) == port || strconv.Itoa(c.Nodes[i].port) == port {
			return i
		}
	}
	return -1
}

// roles returns, as node 0 sees the Cluster, the primary that serves slot
// and its replicas in sync (node indexes). It reads CLUSTER NODES, which
// every server has (CLUSTER SHARDS came with Redis 7.0).
func (c *ReplicatedCluster) roles(slot int) (primary int, replicas []int) {
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr()})
	defer cl.Close()
	out, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER NODES: %v", err)
	}
	type entry struct{ id, port, flags, master string }
	var all []entry
	primary = -1
	var primaryID string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@") // ip:port@cport[,hostname]
		_, port, _ := net.SplitHostPort(addr)
		e := entry{id: f[0], port: port, flags: f[2], master: f[3]}
		all = append(all, e)
		if !strings.Contains(e.flags, "master") || strings.Contains(e.flags, "fail") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && slot >= a && slot <= b {
				primary, primaryID = c.index(port), e.id
			}
		}
	}
	for _, e := range all {
		if primaryID == "" || e.master != primaryID || strings.Contains(e.flags, "fail") {
			continue
		}
		i := c.index(e.port)
		if i < 0 {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr()})
		repl, err := rc.Info(ctx, "replication").Result()
		_ = rc.Close()
		if err == nil && strings.Contains(repl, "master_link_status:up") {
			replicas = append(replicas, i)
		}
	}
	return primary, replicas
}

// FailoverSlot makes the replica of slot's primary take over with CLUSTER
// FAILOVER TAKEOVER (no handshake with the primary and no election, as when
// the primary has failed: a write that had not reached the replica is lost),
// and waits until the Cluster is whole again around the new primary. It returns the old and the
// new primary.
func (c *ReplicatedCluster) FailoverSlot(slot int) (from, to int) {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var replicas []int
	for {
		// The primaries learn of their replicas through gossip.
		from, replicas = c.roles(slot)
		if from >= 0 && len(replicas) > 0 && replicas[0] >= 0 {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: slot %d has no primary with a replica (%d, %v)", slot, from, replicas)
		}
		time.Sleep(20 * time.Millisecond)
	}
	to = replicas[0]
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[to].Addr()})
	defer cl.Close()
	if err := cl.Do(context.Background(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		c.tb.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on node %d: %v", to, err)
	}
	for {
		p, _ := c.roles(slot)
		if p == to {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: node %d did not take slot %d over within 30s", to, slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitWhole(time.Until(deadline))
	return from, to
}

// waitWhole waits until every node sees cluster_state:ok and every replica's
// link to its primary is up.
func (c *ReplicatedCluster) waitWhole(within time.Duration) {
	c.tb.Helper()
	deadline := time.Now().Add(within)
	for i, nd := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: nd.Addr()})
		for {
			info, err1 := cl.ClusterInfo(context.Background()).Result()
			repl, err2 := cl.Info(context.Background(), "replication").Result()
			ok := err1 == nil && err2 == nil && strings.Contains(info, "cluster_state:ok") &&
				(strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up"))
			if ok {
				break
			}
			if time.Now().After(deadline) {
				_ = cl.Close()
				c.tb.Fatalf("redistest: node %d not whole: %v %v\n%s\n%s", i, err1, err2, info, repl)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = cl.Close()
	}
}

// StartWithReplicas starts n independent primaries with replicas replicas
// each (replicating directly, no proxy), waits until every replica's link is
// up, and returns the primaries and, for each, its replicas.
func StartWithReplicas(tb testing.TB, n, replicas int) (primaries []*Node, reps [][]*Node) {
	tb.Helper()
	primaries = Start(tb, n)
	reps = make([][]*Node, n)
	ctx := context.Background()
	for pi, p := range primaries {
		_, port, _ := net.SplitHostPort(p.Addr())
		pc := p.Client()
		if err := pc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil { // sync at once
			tb.Fatalf("redistest: CONFIG SET: %v", err)
		}
		_ = pc.Close()
		for range replicas {
			r := StartNode(tb)
			reps[pi] = append(reps[pi], r)
			c := r.Client()
			if err := c.ReplicaOf(ctx, "127.0.0.1", port).Err(); err != nil {
				tb.Fatalf("redistest: REPLICAOF: %v", err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				info, err := c.Info(ctx, "replication").Result()
				if err == nil && strings.Contains(info, "master_link_status:up") {
					break
				}
				if time.Now().After(deadline) {
					tb.Fatalf("redistest: replica of %s not in sync after 20s: %v", p.Addr(), err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return primaries, reps
}
