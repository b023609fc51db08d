package redlock

import (
	"context"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/slot"
	"github.com/go-redlock/redlock/internal/wake"
)

// ReleasedChannel is the pub/sub channel on which the release script
// announces each resource it freed (the cleanup of a failed acquire attempt
// announces nothing: that lock was never held).
// The message is the freed lock's random part (the first 32 hex characters
// of its value, without its identity) followed by the
// resource's name. Waiters of every Redlock, in every process, that use the
// same nodes wake on it.
//
// On a Redis Cluster (a redis.ClusterClient node) releases are announced
// with sharded pub/sub instead (SPUBLISH, Redis 7+), each on a channel in its
// resource's hash slot: ReleasedChannel + ":{" + the resource's hash tag (or
// whole name) + "}", so that an announcement stays on the resource's shard
// rather than crossing the whole cluster bus. A Redis 6.2 Cluster has no
// sharded pub/sub: its releases are not announced, and its waiters wait
// their retry delay (after one refused subscription, none is asked again
// for a minute).
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
			out = append(out, wake.Source{Open: func(ctx context.Context) driver.Subscription { return nd.Subscribe(ctx, ReleasedChannel, false) }, Sick: nd.Lane("", false).Sick, Node: i})
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
			out = append(out, wake.Source{Open: func(ctx context.Context) driver.Subscription { return nd.Subscribe(ctx, ch, true) }, Sick: nd.Lane(key, false).Sick, Node: i})
		}
	}
	return out
}
