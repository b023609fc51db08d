package redlock

import (
	"context"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/slot"
	"github.com/go-redlock/redlock/internal/wake"
)

// WithWakeOnRelease sets whether a waiting Acquire wakes as soon as one of
// its resources is released, instead of only after its retry delay: every
// release announces the resources it freed on [ReleasedChannel], and the
// Redlock subscribes on every node (one connection each; on a Cluster,
// sharded, one per resource waited for) once an Acquire has to wait or a
// lock is held (a held lock hears its force release there). The waiters of
// one Redlock for the same resources are woken first come first served:
// the first, at each node's announcement. While a node's
// subscription hears their releases, a waiter behind the first makes no
// attempt between wakes, from before its first, when the first one's (or,
// when it has made none yet, the one's before it) last attempt found them
// held by another and its retry delay and jitter are no longer than its
// own (an exclusive lock's; every waiter of a semaphore or a shared lock
// tries, and a fair queue keeps its waiters' places with one call per
// node: see [WithFairQueue]). A wake does not use up a retry; a lost announcement costs
// at most the retry delay. A first waiter whose last attempt did not hear
// from a node (a timeout, a connection still being set up) and that waits
// over a second between attempts is woken when such a node answers again.
// With false, no subscription is opened. Default: true.
func WithWakeOnRelease(on bool) LockOption {
	return func(c *config) { c.wake = on }
}

// ReleasedChannel is the pub/sub channel on which a release announces each
// resource it freed: the lock's 32 random hex characters, then the
// resource's name. Waiters of every Redlock on the same nodes wake on it. On
// a Redis Cluster, releases are announced with sharded pub/sub (Redis 7+) on
// ReleasedChannel + ":{" + the resource's hash tag + "}"; a Redis 6.2
// Cluster announces nothing, and its waiters wait their retry delay.
const ReleasedChannel = script.ReleasedChannel

// shardedPrefix starts the sharded announcement channel of each resource on
// a Cluster; see shardedChannel.
const shardedPrefix = ReleasedChannel + ":"

// shardedChannel returns the channel on which the release of key is
// announced on a Cluster (SPUBLISH from the release script, which runs on
// the key's shard): ReleasedChannel + ":{" + key's hash tag + "}", which
// hashes to key's slot, or, for the rare key for which it would not (a '}'
// and no hash tag), the slot's own number tag.
func shardedChannel(key string) string { return slot.Channel(shardedPrefix, key) }

// announcers are the nodes as the waiters (internal/wake) hear them: a
// Redis server or a Sentinel group announces every release on
// ReleasedChannel; a Cluster announces each resource on its sharded
// channel, heard on the resource's shard. A node whose lane looks silent is
// not subscribed to until it answers.
type announcers []*lane.Node

// Shared implements wake.Nodes.
func (ns announcers) Shared() []wake.Source {
	var out []wake.Source
	for i, nd := range ns {
		if !nd.IsCluster() {
			ln := nd.Lane("", false)
			out = append(out, wake.Source{Open: func(ctx context.Context) driver.Subscription { return nd.Subscribe(ctx, ReleasedChannel, false) },
				Sick: ln.Sick, Probe: func() { probe(ln, nil) }, Node: i})
		}
	}
	return out
}

// PerKey implements wake.Nodes.
func (ns announcers) PerKey(key string) []wake.Source {
	ch := shardedChannel(key)
	var out []wake.Source
	for i, nd := range ns {
		if nd.IsCluster() {
			ln := nd.Lane(key, false)
			out = append(out, wake.Source{Open: func(ctx context.Context) driver.Subscription { return nd.Subscribe(ctx, ch, true) },
				Sick: ln.Sick, Probe: func() { probe(ln, []string{key}) }, Node: i})
		}
	}
	return out
}

// probe asks ln's node whether it answers again (lane.Lane.Probe): keys
// route it to a Cluster shard.
func probe(ln *lane.Lane, keys []string) {
	ln.Probe(&lane.Call{Kind: lane.Write, Hash: script.Probe.Hash, Src: script.Probe.Src, Keys: keys, H: probing{}})
}

// probing is a probe's Handler: its answer only closes the lane's breaker.
type probing struct{}

func (probing) Sendable() bool     { return true }
func (probing) Done(lane.Result)   {}
func (probing) Silent(lane.Result) {}
func (probing) Held() *lane.Call   { return nil }
