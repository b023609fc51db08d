package redlock

import (
	"strconv"
	"strings"
	"sync"
)

// Redis Cluster routes a key by its hash slot: CRC16 (XMODEM) of the key,
// or of its hash tag (the part between the first '{' and the next '}', when
// not empty), modulo 16384. Sharded pub/sub routes a channel the same way,
// so an announcement published (SPUBLISH) from the release script reaches
// the waiters only if its channel hashes to the resource's slot: the node
// that runs the script is that slot's owner, and a subscriber (SSUBSCRIBE)
// is connected there.

// shardedPrefix starts the sharded announcement channel of each resource on
// a Cluster; see shardedChannel.
const shardedPrefix = ReleasedChannel + ":"

// slotOf returns key's hash slot.
func slotOf(key string) uint16 {
	return crc16(hashTag(key)) % 16384
}

// hashTag returns the part of key that Redis Cluster hashes.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// shardedChannel returns the channel on which the release of key is
// announced on a Cluster: ReleasedChannel + ":{" + key's hash tag + "}",
// which hashes to key's slot. For the rare key for which that channel would
// land elsewhere (a key with a '}' and no hash tag), it is the slot's own
// channel, ReleasedChannel + ":{n}" with n chosen to hash there.
func shardedChannel(key string) string {
	slot := slotOf(key)
	if ch := shardedPrefix + "{" + hashTag(key) + "}"; slotOf(ch) == slot {
		return ch
	}
	if ch, ok := slotChannels.Load(slot); ok {
		return ch.(string)
	}
	// About one number in 16384 hashes to a given slot.
	for n := 0; ; n++ {
		if tag := strconv.Itoa(n); crc16(tag)%16384 == slot {
			ch := shardedPrefix + "{" + tag + "}"
			slotChannels.Store(slot, ch)
			return ch
		}
	}
}

// slotChannels caches the slot channels that shardedChannel found.
var slotChannels sync.Map // uint16 -> string

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's.
func crc16(s string) uint16 {
	return crc16Update(0, s)
}

// crc16Update continues crc over s: crc16Update(crc16(a), b) == crc16(a+b).
func crc16Update(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
