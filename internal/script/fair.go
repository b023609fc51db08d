package script

// The fair queue (redlock's WithFairQueue): the waiters of a resource queue
// on each node in one order, and a release hands the resource to the head.
//
// KEYS are the resources, then their queues, then their queues' deadlines
// (3 per resource). A queue is a sorted set of waiters, each "id:ttl" (its
// id: 32 hex characters, then its holder's identity with no ':'; and the
// ttl in ms it asks for), scored by the time
// the waiter began waiting, on its own clock (ARGV): every node orders two
// waiters the same way (by score, then id), so every node agrees on the
// head of those it has. The deadlines are a sorted set of the same
// ids scored by when each leaves the queue unless it asks again (its
// liveness, on the node's clock): a waiter that vanished leaves within it.
// Both expire when no waiter asked for twice that long.

// HandedPrefix starts a release announcement that names the waiter the
// resource was handed to: "~" + waiter id + ":" + the node's time in ms +
// ":" + resource.
const HandedPrefix = "~"

// fairNow is the node's time in milliseconds, read at once; fairClock
// reads it at its first use (clock()) instead, and fairPurge, after one of
// them, drops from the queue q and its deadlines d the waiters whose
// deadline has passed.
const (
	fairNow = `local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function clock() return now end
`
	fairClock = `local now
local function clock()
  if not now then
    local t = redis.call("time")
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
`
	fairPurge = `
local function purge(q, d)
  local gone = redis.call("zrangebyscore", d, "-inf", "(" .. clock())
  if #gone > 0 then
    for _, m in ipairs(gone) do redis.call("zrem", q, m) end
    redis.call("zremrangebyscore", d, "-inf", "(" .. clock())
  end
end
`
)

const (
	// fairAcquireSrc: ARGV[1] is the attempt's value, ARGV[2] the ttl in
	// ms, ARGV[3] the waiter ("id:ttl"), ARGV[4] when it began waiting
	// (ms, its clock), ARGV[5] its liveness in ms, ARGV[6] its id. Each
	// resource must be free with the waiter at the head of its queue (or
	// no queue), or hold the waiter's id (handed to it), or this attempt's
	// value (a resend). Then each free one is taken as acquireSrc does, and
	// each handed one keeps the id, its ttl reset to ARGV[2] from now; the
	// waiter stays queued until its lock's release (so that a failed
	// attempt's cleanup, which frees the key, keeps its place), and it
	// answers {n, 0}. Otherwise the waiter is queued, or its deadline
	// renewed, on every resource, nothing else is written, and it answers
	// {0, the node's time in ms}: a hand-over announced with a later time
	// came after this answer.
	//
	// The clock (TIME) and the purge of lapsed waiters are read only where
	// they decide something: a free resource's head, and a waiter queued.
	// A head handed the resource confirms it with a GET and a PEXPIRE.
	fairAcquireSrc = fairClock + fairPurge + `
local n = #KEYS / 3
local held = false
local vals = {}
for i = 1, n do
  local key, q = KEYS[i], KEYS[n + i]
  local v = redis.call("get", key)
  if v == "` + Tombstone + `" then v = false end -- force-released: free
  vals[i] = v
  if v then
    if v ~= ARGV[1] and v ~= ARGV[6] then` + writerWaits + `held = true end
  else
    purge(q, KEYS[2 * n + i])
    local head = redis.call("zrange", q, 0, 0)[1]
    if head and head ~= ARGV[3] then held = true end
  end
end
if not held then
  for i = 1, n do
    if vals[i] == ARGV[6] then
      redis.call("pexpire", KEYS[i], ARGV[2])
    else
      redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
    end
  end
  return {n, 0}
end
local live, now = tonumber(ARGV[5]), clock()
for i = 1, n do
  local q, d = KEYS[n + i], KEYS[2 * n + i]
  redis.call("zadd", q, "NX", ARGV[4], ARGV[3])
  redis.call("zadd", d, now + live, ARGV[3])
  redis.call("pexpire", q, 2 * live)
  redis.call("pexpire", d, 2 * live)
end
return {0, now}
`

	// fairReleaseSrc releases a lock of the fair queue, or a waiter that
	// gives up: ARGV[1] is the value, ARGV[2] the waiter ("id:ttl"), which
	// leaves the queues, ARGV[3] its id, then the announcement's command
	// and a channel per resource. Each resource that holds ARGV[1] or the
	// id goes to the head of its queue: it holds the head's id, for the
	// head's ttl, announced as HandedPrefix + the head's id + ":" + the
	// node's time + ":" + resource;
	// with no one queued it is deleted, and announced as releaseSrc does.
	fairReleaseSrc = fairNow + fairPurge + `
local n = #KEYS / 3
local count = 0
for i = 1, n do
  local key, q, d = KEYS[i], KEYS[n + i], KEYS[2 * n + i]
  redis.call("zrem", q, ARGV[2])
  redis.call("zrem", d, ARGV[2])
  local v = redis.call("get", key)
  if v and (v == ARGV[1] or v == ARGV[3]) then
    purge(q, d)
    local head = redis.call("zrange", q, 0, 0)[1]
    if head then
      local id, ttl = string.match(head, "^(.*):(%d+)$")
      redis.call("set", key, id, "PX", ttl)
      redis.pcall(ARGV[4], ARGV[4 + i], "` + HandedPrefix + `" .. id .. ":" .. now .. ":" .. key) -- a node without pub/sub still releases
    else
      redis.call("del", key)
      redis.pcall(ARGV[4], ARGV[4 + i], string.sub(ARGV[1], 1, 32) .. key)
    end
    count = count + 1
  end
end
return count
`
)

// fairExtendSrc is extendSrc for a lock of the fair queue, whose resources
// hold its value or its id (ARGV[3]), or nothing: a missing key is written
// again with the value, as extendSrc does, and the node answers -#KEYS.
const fairExtendSrc = `
local lost = false
for _, key in ipairs(KEYS) do
  local v = redis.call("get", key)
  if v and v ~= ARGV[1] and v ~= ARGV[3] then return 0 end
end
for _, key in ipairs(KEYS) do
  if redis.call("get", key) then
    redis.call("pexpire", key, ARGV[2])
  else
    lost = true
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
  end
end
if lost then return -#KEYS end
return #KEYS
`

// fairRenewSrc keeps the places of one process's waiters for a resource:
// KEYS are the resource, its queue and its deadlines; ARGV[1] is the
// liveness in ms, then the waiters ("id:ttl"). Each waiter still queued
// gets its deadline renewed, as its own attempt would renew it; one that
// is not (purged, or the node lost it) is left out. It answers {the node's
// time in ms, the resource's value ("" when free), the queue's head ("" for
// none), the 1-based places in ARGV[2:] of the waiters not queued}. One
// call a liveness's third renews any number of waiters: ZMSCORE (Redis
// 6.2) reads them all, and one ZADD renews them.
const fairRenewSrc = fairNow + fairPurge + `
local q, d, live = KEYS[2], KEYS[3], tonumber(ARGV[1])
purge(q, d)
local scores = redis.call("zmscore", q, unpack(ARGV, 2))
local renew, missing = {}, {}
for i = 2, #ARGV do
  if scores[i - 1] then
    renew[#renew + 1] = now + live
    renew[#renew + 1] = ARGV[i]
  else
    missing[#missing + 1] = i - 1
  end
end
if #renew > 0 then
  redis.call("zadd", d, unpack(renew))
  redis.call("pexpire", q, 2 * live)
  redis.call("pexpire", d, 2 * live)
end
local v = redis.call("get", KEYS[1]) or ""
local head = redis.call("zrange", q, 0, 0)[1] or ""
return {now, v, head, missing}
`

// The scripts of the fair queue. FairAcquire's answer is read as a
// Counter script's: {applied, the node's time when it queued the waiter}.
var (
	FairExtend  = &Script{Src: fairExtendSrc, Hash: newScript(fairExtendSrc).Hash, Restores: true}
	FairAcquire = &Script{Src: fairAcquireSrc, Hash: newScript(fairAcquireSrc).Hash, Counter: true}
	FairRelease = &Script{Src: fairReleaseSrc, Hash: newScript(fairReleaseSrc).Hash, Announces: true}
	FairRenew   = newScript(fairRenewSrc)
)
