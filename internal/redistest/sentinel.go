package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelName starts the name under which a SentinelGroup's sentinels
// monitor its primary: each group has its own (Name), so that sentinels of
// groups side by side never take one another's hello messages for their
// own (a group once saw 5 sentinels of 3 where a link's port was reused).
const SentinelName = "redistest"

// groups numbers the SentinelGroups of the process.
var groups atomic.Int64

// SentinelGroup is a real Sentinel group on loopback: data nodes (a primary
// and its replicas) and sentinels, all redis-server processes.
//
// Replication and the sentinels go through a Link proxy in front of each
// data node (each node announces its link's address), so a test can delay
// the replication stream with SetReplicationLag while its own clients,
// through ClientOptions, reach the nodes directly: a write can then be
// acknowledged to a client and not yet be on any replica, as happens when
// a primary fails under load.
type SentinelGroup struct {
	tb        testing.TB
	Name      string   // the primary's name: SentinelName and the group's number
	Data      []*Node  // Data[0] is the first primary; a failover changes the roles
	Links     []*Proxy // Links[i] is in front of Data[i]
	Sentinels []*Node
}

// StartSentinel starts a primary with replicas replicas, and sentinels
// sentinels (quorum: a majority of them) monitoring it, and waits until
// every sentinel knows every replica. Stopped when the test ends.
func StartSentinel(tb testing.TB, replicas, sentinels int) *SentinelGroup {
	tb.Helper()
	g := &SentinelGroup{tb: tb, Name: fmt.Sprintf("%s-%d-%d", SentinelName, os.Getpid(), groups.Add(1))}
	ctx := context.Background()
	for range replicas + 1 {
		nd := StartNode(tb)
		g.Data = append(g.Data, nd)
		g.Links = append(g.Links, NewProxy(tb, nd.Addr()))
	}
	for i, nd := range g.Data {
		c := nd.Client()
		// Announce the link; start a full sync at once (diskless syncs
		// otherwise wait 5s for more replicas to join).
		for k, v := range map[string]string{"replica-announce-port": linkPort(g.Links[i]), "repl-diskless-sync-delay": "0"} {
			if err := c.ConfigSet(ctx, k, v).Err(); err != nil {
				tb.Fatalf("redistest: CONFIG SET %s: %v", k, err)
			}
		}
		if i > 0 {
			if err := c.ReplicaOf(ctx, "127.0.0.1", linkPort(g.Links[0])).Err(); err != nil {
				tb.Fatalf("redistest: REPLICAOF: %v", err)
			}
		}
	}
	g.waitReplicasUp(0, 20*time.Second)
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s %d\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 2000\n", g.Name, linkPort(g.Links[0]), sentinels/2+1, g.Name, g.Name)
	for range sentinels {
		path := filepath.Join(tb.TempDir(), "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			tb.Fatalf("redistest: sentinel.conf: %v", err)
		}
		g.Sentinels = append(g.Sentinels, startNodeWith(tb, false, path, []string{"--sentinel"}))
	}
	// Every sentinel knows every replica and the other sentinels.
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		for {
			reps, err1 := c.Replicas(ctx, g.Name).Result()
			sens, err2 := c.Sentinels(ctx, g.Name).Result()
			if err1 == nil && err2 == nil && len(reps) == replicas && len(sens) == sentinels-1 {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				tb.Fatalf("redistest: sentinel %s knows %d replicas (%v) and %d sentinels (%v) after 30s", s.Addr(), len(reps), err1, len(sens), err2)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return g
}

func linkPort(p *Proxy) string {
	_, port, _ := net.SplitHostPort(p.Addr())
	return port
}

// SentinelAddrs returns the sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	var as []string
	for _, s := range g.Sentinels {
		as = append(as, s.Addr())
	}
	return as
}

// ClientOptions returns FailoverClient options for the group whose dialer
// reaches the data nodes directly, past their links (see SentinelGroup).
func (g *SentinelGroup) ClientOptions() *redis.FailoverOptions {
	direct := map[string]string{}
	for i, l := range g.Links {
		direct[l.Addr()] = g.Data[i].Addr()
	}
	d := &net.Dialer{Timeout: time.Second}
	return &redis.FailoverOptions{
		MasterName:    g.Name,
		SentinelAddrs: g.SentinelAddrs(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if a, ok := direct[addr]; ok {
				addr = a
			}
			return d.DialContext(ctx, network, addr)
		},
	}
}

// Client returns a FailoverClient for the group (see ClientOptions), closed
// when the test ends.
func (g *SentinelGroup) Client() *redis.Client {
	c := redis.NewFailoverClient(g.ClientOptions())
	g.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// SetReplicationLag delays what each data node sends through its link:
// the replication stream to its replicas (and its replies to the
// sentinels).
func (g *SentinelGroup) SetReplicationLag(d time.Duration) {
	for _, l := range g.Links {
		l.SetLatency(0, d)
	}
}

// Primary returns the index of the data node the sentinels name as primary.
func (g *SentinelGroup) Primary() int {
	g.tb.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0].Addr()})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(context.Background(), g.Name).Result()
	if err != nil {
		g.tb.Fatalf("redistest: SENTINEL get-master-addr-by-name: %v", err)
	}
	for i, l := range g.Links {
		if linkPort(l) == addr[1] {
			return i
		}
	}
	g.tb.Fatalf("redistest: the sentinels name %v, not a node of the group", addr)
	return -1
}

// Failover forces a failover (SENTINEL FAILOVER, which needs no agreement)
// and waits until every sentinel names the new primary, the new primary
// answers as one, and every other data node replicates from it with its link
// up. It returns the old and the new primary's index.
func (g *SentinelGroup) Failover() (from, to int) {
	g.tb.Helper()
	ctx := context.Background()
	from = g.Primary()
	c := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0].Addr()})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Failover(ctx, g.Name).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			g.tb.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		to = -1
		agreed := true
		for _, s := range g.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
			addr, err := sc.GetMasterAddrByName(ctx, g.Name).Result()
			_ = sc.Close()
			if err != nil || addr[1] == linkPort(g.Links[from]) {
				agreed = false
				break
			}
			for i, l := range g.Links {
				if linkPort(l) == addr[1] {
					if to != -1 && to != i {
						agreed = false
					}
					to = i
				}
			}
		}
		if agreed && to >= 0 && g.role(to) == "master" {
			break
		}
		if time.Now().After(deadline) {
			g.tb.Fatalf("redistest: no new primary 30s after SENTINEL FAILOVER (from node %d)", from)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The sentinels turn the old primary into a replica of the new one
	// when they next look at it (up to 10s later); do it now, as they
	// will, so that the group is whole again at once.
	for i, nd := range g.Data {
		if i == to {
			continue
		}
		c := nd.Client()
		if err := c.ReplicaOf(ctx, "127.0.0.1", linkPort(g.Links[to])).Err(); err != nil {
			g.tb.Fatalf("redistest: REPLICAOF on node %d: %v", i, err)
		}
		_ = c.Close()
	}
	g.waitReplicasUp(to, time.Until(deadline))
	// The next failover must start at once when asked for: wait until this
	// one is over for the sentinel that runs them.
	for {
		m, err := c.Master(ctx, g.Name).Result()
		if err == nil && !strings.Contains(m["flags"], "failover_in_progress") {
			break
		}
		if time.Now().After(deadline) {
			g.tb.Fatalf("redistest: the failover is still in progress 30s after SENTINEL FAILOVER: %v %v", m["flags"], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And until it knows the new primary's replicas as good ones to
	// promote (connected, their link up): until then a failover would be
	// refused with NOGOODSLAVE.
	for {
		reps, err := c.Replicas(ctx, g.Name).Result()
		good := 0
		for _, r := range reps {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" && r["master-port"] == linkPort(g.Links[to]) {
				good++
			}
		}
		if err == nil && good == len(g.Data)-1 {
			break
		}
		if time.Now().After(deadline) {
			g.tb.Fatalf("redistest: the sentinel does not see the replicas of node %d as good 30s after SENTINEL FAILOVER: %v %v", to, reps, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return from, to
}

// role returns node i's ROLE.
func (g *SentinelGroup) role(i int) string {
	c := redis.NewClient(&redis.Options{Addr: g.Data[i].Addr()})
	defer c.Close()
	v, err := c.Do(context.Background(), "ROLE").Slice()
	if err != nil || len(v) == 0 {
		return ""
	}
	s, _ := v[0].(string)
	return s
}

// waitReplicasUp waits until every data node but primary replicates from it
// with its link up.
func (g *SentinelGroup) waitReplicasUp(primary int, within time.Duration) {
	g.tb.Helper()
	deadline := time.Now().Add(within)
	want := "master_port:" + linkPort(g.Links[primary])
	for i, nd := range g.Data {
		if i == primary {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: nd.Addr()})
		for {
			info, err := c.Info(context.Background(), "replication").Result()
			if err == nil && strings.Contains(info, want) && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				g.tb.Fatalf("redistest: node %d does not replicate from node %d: %v %s", i, primary, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = c.Close()
	}
}

// ReplicaOffsets is a debugging aid: each data node's replication offset.
func (g *SentinelGroup) ReplicaOffsets() []int64 {
	var out []int64
	for _, nd := range g.Data {
		c := redis.NewClient(&redis.Options{Addr: nd.Addr()})
		info, _ := c.Info(context.Background(), "replication").Result()
		_ = c.Close()
		var off int64 = -1
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				off, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out = append(out, off)
	}
	return out
}
