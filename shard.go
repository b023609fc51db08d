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
	return shardedPrefix + "{" + slotTag(slot) + "}"
}

// slotTag returns the smallest number, in decimal, whose CRC16 lands in
// slot: a hash tag for the slot itself, for the keys and channels of a
// resource that cannot be its own tag. About one number in 16384 lands in a
// given slot; each slot's is searched once, and cached.
func slotTag(slot uint16) string {
	if tag, ok := slotTags.Load(slot); ok {
		return tag.(string)
	}
	for n := 0; ; n++ {
		if tag := strconv.Itoa(n); crc16(tag)%16384 == slot {
			slotTags.Store(slot, tag)
			return tag
		}
	}
}

// slotTags caches slotTag's answers: at most one string per slot.
var slotTags sync.Map // uint16 -> string

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
