// Package slot computes Redis Cluster hash slots, and names keys and
// channels that land in a given key's slot.
//
// Redis Cluster routes a key by its hash slot: CRC16 (XMODEM) of the key,
// or of its hash tag (the part between the first '{' and the next '}', when
// not empty), modulo 16384. Sharded pub/sub routes a channel the same way.
// It imports nothing of redlock's.
package slot

import (
	"strconv"
	"strings"
	"sync"
)

// Count is the number of hash slots.
const Count = 16384

// Of returns key's hash slot.
func Of(key string) uint16 {
	return crc16(HashTag(key)) % Count
}

// HashTag returns the part of key that Redis Cluster hashes: its hash tag,
// or key itself when it has none.
func HashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// Tag returns a hash tag that lands in key's slot and holds no '}', to
// name other keys and channels after: key's own hash tag when it can be
// one, else the slot's number tag (a key with a '}' and no hash tag).
func Tag(key string) string {
	tag := HashTag(key)
	if strings.IndexByte(tag, '}') >= 0 {
		return NumberTag(Of(key))
	}
	return tag
}

// Channel returns prefix + "{" + tag + "}", a name in key's slot: tag is
// key's hash tag, or, for the rare key for which that name would land
// elsewhere (a key with a '}' and no hash tag), the slot's number tag.
func Channel(prefix, key string) string {
	s := Of(key)
	if ch := prefix + "{" + HashTag(key) + "}"; Of(ch) == s {
		return ch
	}
	return prefix + "{" + NumberTag(s) + "}"
}

// NumberTag returns the smallest number, in decimal, whose CRC16 lands in
// slot s: a hash tag for the slot itself. About one number in 16384 lands in
// a given slot; each slot's is searched once, and cached.
func NumberTag(s uint16) string {
	if tag, ok := numberTags.Load(s); ok {
		return tag.(string)
	}
	for n := 0; ; n++ {
		if tag := strconv.Itoa(n); crc16(tag)%Count == s {
			numberTags.Store(s, tag)
			return tag
		}
	}
}

// numberTags caches NumberTag's answers: at most one string per slot.
var numberTags sync.Map // uint16 -> string

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's.
func crc16(s string) uint16 {
	var crc uint16
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
