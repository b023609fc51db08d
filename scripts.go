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
	// fencedAcquireSrc is acquireSrc for a fenced lock (see fence.go):
	// KEYS are the resources, then their fencing counters in the same order.
	// It reads every counter before it writes anything, and answers
	// {applied, highest counter}: a node votes for when applied is the
	// number of resources. A counter that is not a token (a whole number in
	// [0, 2^53-1]) is refused, and so is one at 2^53-1 (no larger token can
	// be drawn), with nothing written.
	fencedAcquireSrc = `
local n = #KEYS / 2
for i = 1, n do
  local v = redis.call("get", KEYS[i])
  if v and v ~= ARGV[1] then return {0, 0} end
end
local top = 0
for i = n + 1, #KEYS do
  local c = redis.call("get", KEYS[i])
  if c then
    local x = tonumber(c)
    if not x or x < 0 or x ~= math.floor(x) or x > 9007199254740991 then
      return redis.error_reply("` + badCounter + `" .. KEYS[i] .. " holds " .. string.sub(c, 1, 40) .. ", which is not a fencing token")
    end
    if x == 9007199254740991 then
      return redis.error_reply("` + exhaustedCounter + `" .. KEYS[i] .. " holds 9007199254740991")
    end
    if x > top then top = x end
  end
end
for i = 1, n do
  redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return {n, top}
`

	// writeBackSrc is a fenced lock's second round: where every resource
	// still holds this lock's value (ARGV[1]), each counter becomes
	// max(counter, token) (ARGV[2]). It answers how many resources hold
	// the value when they all do, else 0, and then writes nothing.
	writeBackSrc = `
local n = #KEYS / 2
for i = 1, n do
  if redis.call("get", KEYS[i]) ~= ARGV[1] then return 0 end
end
local t = tonumber(ARGV[2])
for i = n + 1, #KEYS do
  local c = redis.call("get", KEYS[i])
  local x = tonumber(c or "0")
  if not x then
    return redis.error_reply("` + badCounter + `" .. KEYS[i] .. " holds " .. string.sub(c, 1, 40) .. ", which is not a fencing token")
  end
  if x < t then redis.call("set", KEYS[i], ARGV[2]) end
end
return n
`

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

// badCounter starts the error reply of a fenced script that found a
// fencing counter holding something other than a token, exhaustedCounter
// that of one that found a counter at maxToken.
const (
	badCounter       = "ERR redlock: the fencing counter "
	exhaustedCounter = "ERR redlock: fencing tokens exhausted: the counter "
)

// script is a Lua script with its SHA-1, run with EVALSHA and, when the node
// does not have it cached (NOSCRIPT), with EVAL, which caches it there.
type script struct {
	op   Op
	src  string
	hash string
	// fenced: KEYS are the resources, then their fencing counters, so a
	// vote for applies to half of them; for acquire, the answer is
	// {applied, highest counter}.
	fenced bool
}

func newScript(op Op, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{op: op, src: src, hash: hex.EncodeToString(sum[:])}
}

func newFencedScript(op Op, src string) *script {
	s := newScript(op, src)
	s.fenced = true
	return s
}

var (
	acquireScript = newScript(OpAcquire, acquireSrc)
	extendScript  = newScript(OpExtend, extendSrc)
	releaseScript = newScript(OpRelease, releaseSrc)

	releaseShardedScript = newScript(OpRelease, releaseShardedSrc)
	cleanupScript        = newScript(OpRelease, cleanupSrc)

	fencedAcquireScript = newFencedScript(OpAcquire, fencedAcquireSrc)
	writeBackScript     = newFencedScript(OpFence, writeBackSrc)
)

// judge turns a script's answer to c into a vote; a fenced acquire's
// highest counter goes to c.counter.
func (s *script) judge(res any, err error, c *call) error {
	if err != nil {
		return err
	}
	keys := len(c.keys)
	if s.fenced {
		keys /= 2
		if s.op == OpAcquire {
			a, ok := res.([]any)
			if !ok || len(a) != 2 {
				return &unexpectedResult{res}
			}
			top, ok := a[1].(int64)
			if !ok || top < 0 || top >= maxToken {
				return &unexpectedResult{res}
			}
			c.counter, res = uint64(top), a[0]
		}
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
