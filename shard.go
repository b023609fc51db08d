package redlock

import "github.com/go-redlock/redlock/internal/slot"

// shardedPrefix starts the sharded announcement channel of each resource on
// a Cluster; see shardedChannel.
const shardedPrefix = ReleasedChannel + ":"

// shardedChannel returns the channel on which the release of key is
// announced on a Cluster (SPUBLISH from the release script, which runs on
// the key's shard): ReleasedChannel + ":{" + key's hash tag + "}", which
// hashes to key's slot, or, for the rare key for which it would not (a '}'
// and no hash tag), the slot's own number tag.
func shardedChannel(key string) string { return slot.Channel(shardedPrefix, key) }
