// Package script holds redlock's Lua scripts, their hashes, and the reading
// of their replies. It imports nothing of redlock's: what a reply means as a
// vote is for the caller to say.
package script

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync/atomic"
)

// MaxToken is the largest fencing token and counter: Lua's numbers are
// doubles, exact for integers up to 2^53. A counter that reached it is
// exhausted.
const MaxToken = 1<<53 - 1

// writerWaits is the part of an exclusive acquire that found a key held
// (v) by shared locks: it marks the key (every such key of the lock) so
// that no new shared lock is granted there, and the readers drain (a writer
// is not starved by readers that come and go). The mark says until when, on
// the node's clock: WriterWaitsFor (or the ttl, when shorter) from the
// writer's last attempt, so that a writer that gave up holds new readers
// off no longer than that. It costs a prefix test when the key holds
// anything else.
const writerWaits = `
    if string.sub(v, 1, 14) == "` + SharedMarker + `" then
      local t = redis.call("time")
      local until_ = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + math.min(tonumber(ARGV[2]), ` + writerWaitsForMs + `)
      redis.call("set", key, "` + SharedWriterWaits + `" .. until_, "PX", math.max(redis.call("pttl", key), 1))
    end
    `

// WriterWaitsFor is how long an exclusive acquire's mark keeps new shared
// locks out after its last attempt (see writerWaits), in milliseconds.
const (
	WriterWaitsFor   = 2000
	writerWaitsForMs = "2000"
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
	// is the start the expiration is counted from. A node where another
	// value holds a key answers {0, the first such value's first 16 bytes}
	// (Reply.Holder), instead of 0: an attempt that took some nodes and
	// not a quorum tells by them whether another lock may hold one.
	acquireSrc = `
local held = false
for _, key in ipairs(KEYS) do
  local v = redis.call("get", key)
  if v and v ~= ARGV[1] and v ~= "` + Tombstone + `" then` + writerWaits + `held = held or v end
end
if held then return {0, string.sub(held, 1, ` + holderLen + `)} end
for _, key in ipairs(KEYS) do
  redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
return #KEYS
`

	// extendSrc resets the ttl to ARGV[2] from now (it does not add to what
	// is left) when every key holds this lock's value or nothing, and writes
	// the value again where a key is missing: a node that restarted empty,
	// or that a slower extension (or the acquire) had not reached, takes the
	// lock back, so that a lock held through a rolling restart keeps its
	// spread instead of eroding node by node. Such a node answers -#KEYS
	// (Restored): it no longer held the lock, and its vote is against. A
	// key that holds another value makes it write nothing on the node.
	extendSrc = `
local lost = false
for _, key in ipairs(KEYS) do
  local v = redis.call("get", key)
  if v and v ~= ARGV[1] then return 0 end
  if not v then lost = true end
end
for _, key in ipairs(KEYS) do
  redis.call("set", key, ARGV[1], "PX", ARGV[2])
end
if lost then return -#KEYS end
return #KEYS
`

	// extendManySrc runs extendSrc for several locks in one call, as one
	// after the other: KEYS are their keys one lock after the other, and
	// ARGV, per lock, its number of keys, its value and its ttl. It answers
	// one reply per lock: what extendSrc answers, or the text of the error
	// extendSrc would raise (a key that holds another type, a SET the node
	// refuses); or AloneMark and the error, for a lock whose TYPE the node
	// refused before it wrote anything of it (it goes again alone). Only
	// the MGET, before any write, may fail the call itself. One MGET reads
	// every key (a lane sends no two locks with a key in common together):
	// about one command per lock and node, where extendSrc costs three
	// (its EVALSHA, a GET and a SET).
	extendManySrc = `
local vals = redis.call("mget", unpack(KEYS))
local out = {}
local k = 0
for a = 1, #ARGV, 3 do
  local n, value, ttl = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2]
  local r, lost = n, false
  for i = k + 1, k + n do
    local v = vals[i]
    if not v then
      local t = redis.pcall("type", KEYS[i])
      if t["err"] then
        r = "` + AloneMark + `" .. t["err"]
        break
      end
      if t["ok"] ~= "none" then
        r = "` + WrongType + `"
        break
      end
      lost = true
    elseif v ~= value then
      r = 0
      break
    end
  end
  if r == n then
    for i = k + 1, k + n do
      local w = redis.pcall("set", KEYS[i], value, "PX", ttl)
      if type(w) == "table" and w["err"] then
        r = w["err"]
        break
      end
    end
    if r == n and lost then r = -n end
  end
  out[#out + 1] = r
  k = k + n
end
return out
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
    redis.pcall("publish", "` + ReleasedChannel + `", string.sub(ARGV[1], 1, 32) .. key) -- a node without pub/sub still releases
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

	// fencedAcquireSrc is acquireSrc for a fenced lock (see fence.go in package redlock):
	// KEYS are the resources, then their fencing counters in the same order.
	// It reads every counter before it writes anything, and answers
	// {applied, highest counter}: a node votes for when applied is the
	// number of resources. A counter that is not a token (a whole number in
	// [0, 2^53-1]) is refused, and so is one at 2^53-1 (no larger token can
	// be drawn), with nothing written.
	fencedAcquireSrc = `
local n = #KEYS / 2
local held = false
for i = 1, n do
  local key = KEYS[i]
  local v = redis.call("get", key)
  if v and v ~= ARGV[1] and v ~= "` + Tombstone + `" then` + writerWaits + `held = true end
end
if held then return {0, 0} end
local top = 0
for i = n + 1, #KEYS do
  local c = redis.call("get", KEYS[i])
  if c then
    local x = tonumber(c)
    if not x or x < 0 or x ~= math.floor(x) or x > 9007199254740991 then
      return redis.error_reply("` + BadCounter + `" .. KEYS[i] .. " holds " .. string.sub(c, 1, 40) .. ", which is not a fencing token")
    end
    if x == 9007199254740991 then
      return redis.error_reply("` + ExhaustedCounter + `" .. KEYS[i] .. " holds 9007199254740991")
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
    return redis.error_reply("` + BadCounter + `" .. KEYS[i] .. " holds " .. string.sub(c, 1, 40) .. ", which is not a fencing token")
  end
  if x < t then redis.call("set", KEYS[i], ARGV[2]) end
end
return n
`

	// fencedExtendSrc is extendSrc for a fenced lock: KEYS are the
	// resources, then their counters; ARGV the value, the ttl, the lock's
	// token. Where it extends (or restores) the lock, each counter becomes
	// max(counter, token), so that a node that lost its counters in a
	// restart has them back at the lock's next extension, and a later
	// lock's token is drawn above this one there too.
	fencedExtendSrc = `
local n = #KEYS / 2
for i = 1, n do
  local v = redis.call("get", KEYS[i])
  if v and v ~= ARGV[1] then return 0 end
end
local t = tonumber(ARGV[3])
for i = n + 1, #KEYS do
  local c = redis.call("get", KEYS[i])
  if c and not tonumber(c) then
    return redis.error_reply("` + BadCounter + `" .. KEYS[i] .. " holds " .. string.sub(c, 1, 40) .. ", which is not a fencing token")
  end
end
local lost = false
for i = 1, n do
  if not redis.call("get", KEYS[i]) then lost = true end
  redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
for i = n + 1, #KEYS do
  if tonumber(redis.call("get", KEYS[i]) or "0") < t then redis.call("set", KEYS[i], ARGV[3]) end
end
if lost then return -n end
return n
`

	// releaseShardedSrc is releaseSrc for a Redis Cluster: each freed key
	// is announced with SPUBLISH (sharded pub/sub, which stays on the
	// key's shard instead of crossing the whole cluster bus) on its own
	// channel, ARGV[i+1] (see package slot).
	releaseShardedSrc = `
local count = 0
for i, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then
    redis.call("del", key)
    redis.pcall("spublish", ARGV[i + 1], string.sub(ARGV[1], 1, 32) .. key) -- Redis < 7 still releases
    count = count + 1
  end
end
return count
`
)

// BadCounter starts the error reply of a fenced script that found a
// fencing counter holding something other than a token, ExhaustedCounter
// that of one that found a counter at MaxToken.
const (
	// WrongType is the error of a script that reads a key holding
	// another type than a string, as Redis words it.
	WrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	// AloneMark starts a reply of ExtendMany for a lock that the call
	// could not run (the node refused its TYPE) and that goes again alone.
	AloneMark        = "ALONE "
	BadCounter       = "ERR redlock: the fencing counter "
	ExhaustedCounter = "ERR redlock: fencing tokens exhausted: the counter "
)

// Script is a Lua script with its SHA-1, run with EVALSHA and, when the node
// does not have it cached (NOSCRIPT), with EVAL, which caches it there.
type Script struct {
	Src  string
	Hash string
	// Counter: the reply is {applied, highest counter} (the fenced acquire).
	Counter bool
	// Picks: the reply is {applied, the permit taken of each resource...}
	// (a semaphore's acquire), or {0} when it applied to none.
	Picks bool
	// Announces: ARGV ends with the command that announces a release
	// ("publish", or "spublish" on a Cluster), then a channel per
	// resource (see package redlock's scriptFor).
	Announces bool
	// Restores: an extension, which answers -n where it wrote back keys
	// the node had lost (Reply.Restored).
	Restores bool
	// Holders: an acquire that answers, where another value holds a key,
	// {0, that value's start} (Reply.Holder) instead of 0.
	Holders bool

	hashArg atomic.Pointer[any] // Hash boxed, made on first use (HashArg)
}

// HashArg returns s.Hash as a command's argument: boxed once, so that a
// command made of it allocates nothing for it.
func (s *Script) HashArg() any {
	if h := s.hashArg.Load(); h != nil {
		return *h
	}
	h := any(s.Hash)
	s.hashArg.Store(&h) // racing callers store equal values
	return h
}

// newScript makes the script of src, with the hash go generate wrote for
// it in hashes_gen.go: no SHA-1 is computed at run time (see hashes.go).
func newScript(src string) *Script {
	fp := fnv.New64a()
	fp.Write([]byte(src))
	return &Script{Src: src, Hash: hashes[fp.Sum64()]}
}

// probeSrc answers 1: a lane's probe of a silent node that no other call
// would ask (see lane.Lane.Probe). Its KEYS, when given, only route it to
// a Cluster shard.
const probeSrc = `return 1`

// The scripts.
var (
	Probe          = newScript(probeSrc)
	Acquire        = &Script{Src: acquireSrc, Hash: newScript(acquireSrc).Hash, Holders: true}
	Extend         = &Script{Src: extendSrc, Hash: newScript(extendSrc).Hash, Restores: true}
	ExtendMany     = newScript(extendManySrc)
	Release        = newScript(releaseSrc)
	ReleaseSharded = newScript(releaseShardedSrc)
	Cleanup        = newScript(cleanupSrc)
	FencedAcquire  = &Script{Src: fencedAcquireSrc, Hash: newScript(fencedAcquireSrc).Hash, Counter: true}
	WriteBack      = newScript(writeBackSrc)
	FencedExtend   = &Script{Src: fencedExtendSrc, Hash: newScript(fencedExtendSrc).Hash, Restores: true}
)

// Reply is what a script answered, read.
type Reply struct {
	Applied   int64  // the resources it applied to
	Resources int    // the resources it was given
	Counter   uint64 // Counter scripts: the highest fencing counter of the resources
	Picks     string // Picks scripts: the permit taken of each resource, "2" or "2,1"
	// Restored: an extension applied, but the node had lost some of the
	// lock's keys and it wrote them back: the node did not hold the lock.
	Restored bool
	// NoRoom: a semaphore's acquire found every permit of a resource
	// taken (Picks scripts).
	NoRoom bool
	// Holder: a Holders script that applied to none, the first
	// HolderLen bytes of the value it found holding a key.
	Holder string
}

// HolderLen is how much of a holding value Reply.Holder has: of a value of
// this library's, the start of its random part (two locks' values differ
// there but for a chance of 2^-64).
const HolderLen = 16

const holderLen = "16" // HolderLen, in the scripts' source

// Full reports whether the script applied to every resource, and (an
// extension) the node still held every one.
func (r Reply) Full() bool { return r.Applied == int64(r.Resources) && !r.Restored }

// Read reads s's answer res to a call on that many resources (a fenced
// script's KEYS hold their counters too, a semaphore's its permits), or
// returns an *UnexpectedError when res is not an answer s gives.
func (s *Script) Read(res any, resources int) (Reply, error) {
	r := Reply{Resources: resources}
	if s.Counter {
		a, ok := res.([]any)
		if !ok || len(a) != 2 {
			return r, &UnexpectedError{res}
		}
		top, ok := a[1].(int64)
		if !ok || top < 0 || top >= MaxToken {
			return r, &UnexpectedError{res}
		}
		r.Counter, res = uint64(top), a[0]
	}
	if s.Picks {
		a, ok := res.([]any)
		if !ok || len(a) == 0 {
			return r, &UnexpectedError{res}
		}
		if n, _ := a[0].(int64); n == 0 && len(a) == 2 {
			if x, _ := a[1].(int64); x == -1 {
				r.NoRoom = true
				a = a[:1]
			}
		}
		if n, _ := a[0].(int64); n != 0 {
			if len(a) != resources+1 {
				return r, &UnexpectedError{res}
			}
			b := make([]byte, 0, 4*resources)
			for i, x := range a[1:] {
				p, ok := x.(int64)
				if !ok || p < 1 {
					return r, &UnexpectedError{res}
				}
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, p, 10)
			}
			r.Picks = string(b)
		}
		res = a[0]
	}
	if a, ok := res.([]any); ok && s.Holders && len(a) == 2 {
		h, ok := a[1].(string)
		if n, _ := a[0].(int64); n != 0 || !ok || len(h) > HolderLen {
			return r, &UnexpectedError{res}
		}
		r.Holder = h
		return r, nil
	}
	n, ok := res.(int64)
	if !ok {
		return r, &UnexpectedError{res}
	}
	if n < 0 { // an extension that wrote back keys the node had lost
		if !s.Restores || -n != int64(resources) {
			return r, &UnexpectedError{res}
		}
		r.Restored, n = true, -n
	}
	r.Applied = n
	return r, nil
}

// UnexpectedError is an answer that is not one a script (or a command) gives.
type UnexpectedError struct{ Reply any }

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("redlock: unexpected result of type %T returned from redis", e.Reply)
}

const (
	// leaderSrc reads an election on one node: KEYS are its lock key and
	// its leader record. It answers the record when the key holds the
	// record's value (the node's leader), else "" (none, or a candidate
	// whose term was not written there yet).
	leaderSrc = `
local v = redis.call("get", KEYS[1])
if not v then return "" end
local rec = redis.call("get", KEYS[2])
if rec and string.sub(rec, 1, #v + 1) == v .. ":" then return rec end
return ""
`
)

// electExtendSrc extends a term: extendSrc for the election's lock key
// (which it writes again where it is missing, as extendSrc does), which also
// writes the term's record (value:term:id) and raises the counter where they
// lag or are missing, and announces the term on ElectedChannel where it
// wrote the record. A term's first extension, right after its grant,
// records it; the later ones mend a node that missed it or lost it. KEYS:
// the lock key, its counter, its record; ARGV the value, the ttl, the term,
// the id. It answers 1 when it extended, -1 when it wrote the lock key back
// (Restored), else 0.
const electExtendSrc = `
local v = redis.call("get", KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
local held = 1
if not v then held = -1 end
local rec = ARGV[1] .. ":" .. ARGV[3] .. ":" .. ARGV[4]
if redis.call("get", KEYS[3]) ~= rec then
  redis.call("set", KEYS[3], rec)
  redis.pcall("publish", "` + ElectedChannel + `", KEYS[1]) -- a node without pub/sub still elects
end
local x = tonumber(redis.call("get", KEYS[2]) or "0")
if x and x < tonumber(ARGV[3]) then redis.call("set", KEYS[2], ARGV[3]) end
return held
`

// The election's scripts. ElectExtend's KEYS are one lock key, its
// counter and its record: one resource.
var (
	ElectExtend = &Script{Src: electExtendSrc, Hash: newScript(electExtendSrc).Hash, Restores: true}
	Leader      = newScript(leaderSrc)
)

// Record is a node's leader record, as leaderSrc answers it.
type Record struct {
	Value string // the leader's lock value
	Term  uint64
	ID    string
}

// ReadRecord reads leaderSrc's answer: ok is false when the node has no
// leader; err is an *UnexpectedError for an answer leaderSrc never gives.
func ReadRecord(res any) (rec Record, ok bool, err error) {
	s, isStr := res.(string)
	if !isStr {
		return rec, false, &UnexpectedError{res}
	}
	if s == "" {
		return rec, false, nil
	}
	v, rest, ok1 := strings.Cut(s, ":")
	t, id, ok2 := strings.Cut(rest, ":")
	term, perr := strconv.ParseUint(t, 10, 64)
	if !ok1 || !ok2 || perr != nil || v == "" || term == 0 {
		return rec, false, &UnexpectedError{res}
	}
	return Record{Value: v, Term: term, ID: id}, true, nil
}

// now is the node's clock in milliseconds, for the readers' expiry.
const nowLua = `
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

const (
	// permitAcquireSrc takes one of n permits of each resource. KEYS, per
	// resource: the resource (its marker), then its n permit keys. ARGV:
	// the value, the ttl, n. On each resource it takes the permit that
	// already holds the value (a re-send), else the first free one in an
	// order that starts at a place drawn from the value, so that
	// contenders spread over the permits. It answers {m, the permit taken
	// of each}, or (writing nothing) {0, -1} when a resource has no free
	// permit and {0} when one is held by an exclusive lock; an error reply when the
	// resource is a lock of another kind.
	permitAcquireSrc = `
local n = tonumber(ARGV[3])
local marker = "` + PermitsMarker + `" .. ARGV[3]
local m = #KEYS / (n + 1)
local start = tonumber(string.sub(ARGV[1], 1, 6), 16) % n
local picks = {}
for r = 0, m - 1 do
  local b = r * (n + 1)
  local v = redis.call("get", KEYS[b + 1])
  if v == "` + Tombstone + `" then v = false end
  if v and v ~= marker then
    if string.sub(v, 1, 16) == "` + PermitsMarker + `" then
      return redis.error_reply("` + MixedKinds + `" .. KEYS[b + 1] .. " is a semaphore of " .. string.sub(v, 17) .. " permits, not " .. ARGV[3])
    end
    if string.sub(v, 1, 14) == "` + SharedMarker + `" then
      return redis.error_reply("` + MixedKinds + `" .. KEYS[b + 1] .. " is a shared lock, not a semaphore")
    end
    return {0}
  end
  local pick = 0
  for i = 1, n do
    if redis.call("get", KEYS[b + 1 + i]) == ARGV[1] then pick = i break end
  end
  if pick == 0 then
    for j = 0, n - 1 do
      local i = (start + j) % n + 1
      local pv = redis.call("get", KEYS[b + 1 + i])
      if not pv or pv == "` + Tombstone + `" then pick = i break end
    end
  end
  if pick == 0 then return {0, -1} end -- every permit taken
  picks[r + 1] = pick
end
local ttl = tonumber(ARGV[2])
for r = 0, m - 1 do
  local b = r * (n + 1)
  redis.call("set", KEYS[b + 1 + picks[r + 1]], ARGV[1], "PX", ttl)
  if redis.call("get", KEYS[b + 1]) ~= marker or redis.call("pttl", KEYS[b + 1]) < ttl then redis.call("set", KEYS[b + 1], marker, "PX", ttl) end
end
local out = {m}
for r = 1, m do out[r + 1] = picks[r] end
return out
`

	// permitExtendSrc sets the ttl of the permits a lock holds: KEYS as
	// permitAcquireSrc's, ARGV the value, the ttl, n, then the permit of
	// each resource. All or nothing, as extendSrc: a permit key that is
	// missing is written again (a node that restarted empty) when the
	// resource is free or a semaphore of the same n; one held by another
	// value, or a resource held by another kind, makes it write nothing.
	// The marker lives at least as long as every permit.
	permitExtendSrc = `
local n = tonumber(ARGV[3])
local m = #KEYS / (n + 1)
local marker = "` + PermitsMarker + `" .. ARGV[3]
local lost = false
for r = 0, m - 1 do
  local b = r * (n + 1)
  local v = redis.call("get", KEYS[b + 1 + tonumber(ARGV[4 + r])])
  if v and v ~= ARGV[1] then return 0 end
  if not v then lost = true end
  local mk = redis.call("get", KEYS[b + 1])
  if mk and mk ~= marker then return 0 end
end
local ttl = tonumber(ARGV[2])
for r = 0, m - 1 do
  local b = r * (n + 1)
  redis.call("set", KEYS[b + 1 + tonumber(ARGV[4 + r])], ARGV[1], "PX", ttl)
  if redis.call("pttl", KEYS[b + 1]) < ttl then
    redis.call("set", KEYS[b + 1], marker, "PX", ttl)
  end
end
if lost then return -m end
return m
`

	// permitReleaseSrc frees the permits a lock holds: KEYS as
	// permitAcquireSrc's, ARGV the value, n, the permit of each resource,
	// then (Announces) the command and a channel per resource. Each permit
	// freed is announced; the marker goes with the last permit. It
	// answers how many permits it freed.
	permitReleaseSrc = `
local n = tonumber(ARGV[2])
local m = #KEYS / (n + 1)
local count = 0
for r = 0, m - 1 do
  local b = r * (n + 1)
  local key = KEYS[b + 1 + tonumber(ARGV[3 + r])]
  if redis.call("get", key) == ARGV[1] then
    redis.call("del", key)
    redis.pcall(ARGV[3 + m], ARGV[4 + m + r], string.sub(ARGV[1], 1, 32) .. KEYS[b + 1]) -- a node without pub/sub still releases
    count = count + 1
  end
  local left = false
  for i = 1, n do
    local pv = redis.call("get", KEYS[b + 1 + i])
    if pv and pv ~= "` + Tombstone + `" then left = true break end
  end
  if not left and redis.call("get", KEYS[b + 1]) == "` + PermitsMarker + `" .. ARGV[2] then redis.call("del", KEYS[b + 1]) end
end
return count
`

	// permitCleanupSrc releases a failed attempt's permits, whichever it
	// took (KEYS as permitAcquireSrc's, ARGV the value and n), and the
	// marker when no permit is left; it announces nothing.
	permitCleanupSrc = `
local n = tonumber(ARGV[2])
local m = #KEYS / (n + 1)
local count = 0
for r = 0, m - 1 do
  local b = r * (n + 1)
  local left = false
  for i = 1, n do
    local v = redis.call("get", KEYS[b + 1 + i])
    if v == ARGV[1] then
      redis.call("del", KEYS[b + 1 + i])
      count = count + 1
    elseif v and v ~= "` + Tombstone + `" then
      left = true
    end
  end
  if not left and redis.call("get", KEYS[b + 1]) == "` + PermitsMarker + `" .. ARGV[2] then redis.call("del", KEYS[b + 1]) end
end
return count
`

	// sharedAcquireSrc takes a shared lock on each resource. KEYS, per
	// resource: the resource (its marker), then its readers, a sorted set
	// of values scored by their expiry on the node's clock. ARGV: the
	// value, the ttl. It applies to none when a resource is held by an
	// exclusive lock, or a writer waits there (SharedWriterWaits); an
	// error reply when the resource is a semaphore. The marker lives at
	// least as long as every reader.
	sharedAcquireSrc = nowLua + `
for i = 1, #KEYS, 2 do
  local v = redis.call("get", KEYS[i])
  if v and v ~= "` + SharedMarker + `" and v ~= "` + Tombstone + `" then
    if string.sub(v, 1, 16) == "` + PermitsMarker + `" then
      return redis.error_reply("` + MixedKinds + `" .. KEYS[i] .. " is a semaphore of " .. string.sub(v, 17) .. " permits, not a shared lock")
    end
    if string.sub(v, 1, 17) ~= "` + SharedWriterWaits + `" or (tonumber(string.sub(v, 18)) or 0) > now then
      return 0 -- an exclusive lock, or a writer waiting
    end
  end
end
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS, 2 do
  redis.call("zremrangebyscore", KEYS[i + 1], 0, now)
  redis.call("zremrangebyscore", KEYS[i + 1], -now, "(0")
  redis.call("zadd", KEYS[i + 1], now + ttl, ARGV[1])
  if redis.call("pttl", KEYS[i + 1]) < ttl then redis.call("pexpire", KEYS[i + 1], ttl) end
  local pt = redis.call("pttl", KEYS[i])
  if redis.call("get", KEYS[i]) == "` + Tombstone + `" then pt = -2 end -- a tombstone's ttl is not the readers'
  if pt < ttl or redis.call("get", KEYS[i]) ~= "` + SharedMarker + `" then
    redis.call("set", KEYS[i], "` + SharedMarker + `", "PX", math.max(pt, ttl)) -- a writer's mark that lapsed goes
  end
end
return #KEYS / 2
`

	// sharedExtendSrc sets the ttl of a shared lock's readers: KEYS as
	// sharedAcquireSrc's, ARGV the value and the ttl. All or nothing. A
	// reader that is missing (a node that restarted empty, or whose entry
	// lapsed) is added again where the resource is free or a shared lock
	// (a writer's waiting mark included: the reader held it already); an
	// exclusive lock or a semaphore there makes it write nothing.
	sharedExtendSrc = nowLua + `
local lost = false
for i = 1, #KEYS, 2 do
  local v = redis.call("get", KEYS[i])
  if v and string.sub(v, 1, 14) ~= "` + SharedMarker + `" then return 0 end
  local s = redis.call("zscore", KEYS[i + 1], ARGV[1])
  if s and tonumber(s) < 0 then return 0 end -- force-released (a tombstone)
  if not s or tonumber(s) <= now then lost = true end
end
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS, 2 do
  redis.call("zadd", KEYS[i + 1], now + ttl, ARGV[1])
  if redis.call("pttl", KEYS[i + 1]) < ttl then redis.call("pexpire", KEYS[i + 1], ttl) end
  local pt = redis.call("pttl", KEYS[i])
  if pt == -2 then
    redis.call("set", KEYS[i], "` + SharedMarker + `", "PX", ttl)
  elseif pt < ttl then
    redis.call("pexpire", KEYS[i], ttl)
  end
end
if lost then return -#KEYS / 2 end
return #KEYS / 2
`

	// sharedReleaseSrc removes a shared lock's readers: KEYS as
	// sharedAcquireSrc's, ARGV the value, then (Announces) the command and
	// a channel per resource. The last reader to leave deletes the marker
	// and announces the resource free. It answers how many of its readers
	// it removed before their expiry.
	sharedReleaseSrc = nowLua + `
local m = #KEYS / 2
local count = 0
for i = 1, #KEYS, 2 do
  local s = redis.call("zscore", KEYS[i + 1], ARGV[1])
  if s and tonumber(s) > 0 then
    redis.call("zrem", KEYS[i + 1], ARGV[1])
    if tonumber(s) > now then count = count + 1 end
  end
  redis.call("zremrangebyscore", KEYS[i + 1], 0, now)
  redis.call("zremrangebyscore", KEYS[i + 1], -now, "(0")
  if redis.call("zcount", KEYS[i + 1], "(0", "+inf") == 0 then
    local v = redis.call("get", KEYS[i])
    if v and string.sub(v, 1, 14) == "` + SharedMarker + `" then
      redis.call("del", KEYS[i])
      redis.pcall(ARGV[2], ARGV[3 + (i - 1) / 2], string.sub(ARGV[1], 1, 32) .. KEYS[i])
    end
  end
end
return count
`

	// sharedCleanupSrc is sharedReleaseSrc for a failed attempt: it
	// announces nothing.
	sharedCleanupSrc = nowLua + `
local count = 0
for i = 1, #KEYS, 2 do
  if redis.call("zrem", KEYS[i + 1], ARGV[1]) == 1 then count = count + 1 end
  redis.call("zremrangebyscore", KEYS[i + 1], 0, now)
  redis.call("zremrangebyscore", KEYS[i + 1], -now, "(0")
  if redis.call("zcount", KEYS[i + 1], "(0", "+inf") == 0 then
    local v = redis.call("get", KEYS[i])
    if v and string.sub(v, 1, 14) == "` + SharedMarker + `" then redis.call("del", KEYS[i]) end
  end
end
return count
`
)

// The scripts of semaphores (WithPermits) and shared locks (WithShared).
var (
	PermitAcquire = &Script{Src: permitAcquireSrc, Hash: newScript(permitAcquireSrc).Hash, Picks: true}
	PermitExtend  = &Script{Src: permitExtendSrc, Hash: newScript(permitExtendSrc).Hash, Restores: true}
	PermitRelease = &Script{Src: permitReleaseSrc, Hash: newScript(permitReleaseSrc).Hash, Announces: true}
	PermitCleanup = newScript(permitCleanupSrc)
	SharedAcquire = newScript(sharedAcquireSrc)
	SharedExtend  = &Script{Src: sharedExtendSrc, Hash: newScript(sharedExtendSrc).Hash, Restores: true}
	SharedRelease = &Script{Src: sharedReleaseSrc, Hash: newScript(sharedReleaseSrc).Hash, Announces: true}
	SharedCleanup = newScript(sharedCleanupSrc)
)
