package redlock

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
)

// The Lua scripts. KEYS are the resources; ARGV[1] is the lock's value and,
// for acquire and extend, ARGV[2] the ttl in milliseconds. Each returns how
// many resources it applied to; only len(KEYS) counts as a vote for.
//
// Each script is all-or-nothing on a node for acquire and extend: it checks
// every key before it writes any. Redis runs a script atomically, so no other
// client sees a half-applied lock.
const (
	// acquireSrc differs from node-redlock's in one place: a key that already
	// holds this attempt's own value does not block it. go-redis resends a
	// command after a network error (MaxRetries), and the first send may
	// have run: the resend then counts for us instead of blocking itself.
	// Setting the key again resets its ttl from this attempt's start, which
	// is the start the expiration is counted from.
	acquireSrc = `
for _, key in ipairs(KEYS) do
  local v = redis.call("get", key)
  if v and v ~= ARGV[1] then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return #KEYS
`

	// extendSrc resets the ttl to ARGV[2] from now (it does not add to what
	// is left) when every key still holds this lock's value.
	extendSrc = `
for _, key in ipairs(KEYS) do
  if redis.call("get", key) ~= ARGV[1] then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call("pexpire", key, ARGV[2])
end
return #KEYS
`

	// releaseSrc deletes the keys that hold this lock's value and counts
	// them, so that an expired or stolen key counts against. Each freed key
	// is announced on ReleasedChannel as value..key, for the waiters (see
	// waker).
	releaseSrc = `
local count = 0
for _, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then
    redis.call("del", key)
    redis.pcall("publish", "` + ReleasedChannel + `", ARGV[1] .. key) -- a node without pub/sub still releases
    count = count + 1
  end
end
return count
`

	// cleanupSrc releases a failed acquire attempt's writes. It announces
	// nothing: the lock was never held, and a waiter woken by it would
	// spend its retry on a resource that someone else still holds.
	cleanupSrc = `
local count = 0
for _, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then
    redis.call("del", key)
    count = count + 1
  end
end
return count
`

	// releaseShardedSrc is releaseSrc for a Redis Cluster: each freed key
	// is announced with SPUBLISH (sharded pub/sub, which stays on the
	// key's shard instead of crossing the whole cluster bus) on its own
	// channel, ARGV[i+1] (see shardedChannel).
	releaseShardedSrc = `
local count = 0
for i, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then
    redis.call("del", key)
    redis.pcall("spublish", ARGV[i + 1], ARGV[1] .. key) -- Redis < 7 still releases
    count = count + 1
  end
end
return count
`
)

// script is a Lua script with its SHA-1, run with EVALSHA and, when the node
// does not have it cached (NOSCRIPT), with EVAL, which caches it there.
type script struct {
	op   Op
	src  string
	hash string
}

func newScript(op Op, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{op: op, src: src, hash: hex.EncodeToString(sum[:])}
}

var (
	acquireScript = newScript(OpAcquire, acquireSrc)
	extendScript  = newScript(OpExtend, extendSrc)
	releaseScript = newScript(OpRelease, releaseSrc)

	releaseShardedScript = newScript(OpRelease, releaseShardedSrc)
	cleanupScript        = newScript(OpRelease, cleanupSrc)
)

// judge turns a script's answer into a vote.
func (s *script) judge(res any, err error, keys int) error {
	if err != nil {
		return err
	}
	n, ok := res.(int64)
	if !ok {
		return &unexpectedResult{res}
	}
	if n != int64(keys) {
		return &ResourceLockedError{Op: s.op, Applied: n, Requested: keys}
	}
	return nil
}

// unexpectedResult is a script's answer that is not a count.
type unexpectedResult struct{ res any }

func (e *unexpectedResult) Error() string {
	return fmt.Sprintf("redlock: unexpected result of type %T returned from redis", e.res)
}
