package script

// What an operator sees and undoes: the reading of a resource on a node
// (Inspect), and the removal of its holders (ForceRelease).

// inspectSrc reads a resource on one node. KEYS: the resource, its fencing
// counter, its queue, its queue's deadlines, its readers, its leader record
// (all in its slot); ARGV[1]: the prefix of its permit keys (the permit's
// number follows), which it reads when the resource is a semaphore (they
// are in the resource's slot too). It answers {the resource's value or "",
// its pttl, the counter or "", the live waiters in queue order, the live
// readers and the ms each has left, the leader record or "", the held
// permits as number, value and pttl, the node's time in ms}.
const inspectSrc = nowLua + `
local v = redis.call("get", KEYS[1])
local pt = redis.call("pttl", KEYS[1])
local waiters = {}
for _, m in ipairs(redis.call("zrange", KEYS[3], 0, -1)) do
  local d = redis.call("zscore", KEYS[4], m)
  if d and tonumber(d) >= now then waiters[#waiters + 1] = m end
end
local readers = {}
local rs = redis.call("zrangebyscore", KEYS[5], "(" .. now, "+inf", "WITHSCORES")
for j = 1, #rs, 2 do
  readers[#readers + 1] = rs[j]
  readers[#readers + 1] = string.format("%d", tonumber(rs[j + 1]) - now)
end
local permits = {}
if v and string.sub(v, 1, 16) == "` + PermitsMarker + `" then
  local n = tonumber(string.sub(v, 17)) or 0
  for i = 1, n do
    local k = ARGV[1] .. i
    local pv = redis.call("get", k)
    if pv and pv ~= "` + Tombstone + `" then
      permits[#permits + 1] = tostring(i)
      permits[#permits + 1] = pv
      permits[#permits + 1] = tostring(redis.call("pttl", k))
    end
  end
end
return {v or "", pt, redis.call("get", KEYS[2]) or "", waiters, readers, redis.call("get", KEYS[6]) or "", permits, string.format("%d", now)}
`

// forceSrc removes holders of a resource on one node, whatever its kind.
// KEYS: the resource, its queue, its readers; ARGV: the prefix of its
// permit keys, the margin in ms a tombstone outlives what its holder had
// left, the announcement's command and channel, then the values to remove
// (none: every holder). An exclusive lock's key, or a permit's, becomes a
// Tombstone; a reader becomes a tombstone in the readers' set; a resource
// left with no holder loses its marker. A fair lock's waiter that the
// resource was handed to leaves the queue. Each removed holder is announced
// as a release of its value, so that it hears it. Fencing counters are not touched. It answers how many
// holders it removed.
const forceSrc = nowLua + `
local res, queue, readers = KEYS[1], KEYS[2], KEYS[3]
local margin = tonumber(ARGV[2])
local all = #ARGV < 5
local want = {}
for i = 5, #ARGV do want[ARGV[i]] = true end
local function hit(x) return all or want[x] end
local function announce(x) redis.pcall(ARGV[3], ARGV[4], string.sub(x .. string.rep("-", 32), 1, 32) .. res) end -- 32 characters, then the resource; a node without pub/sub still releases
local v = redis.call("get", res)
if not v or v == "` + Tombstone + `" then return 0 end
local count = 0
if string.sub(v, 1, 16) == "` + PermitsMarker + `" then
  local n = tonumber(string.sub(v, 17)) or 0
  local left = false
  for i = 1, n do
    local k = ARGV[1] .. i
    local pv = redis.call("get", k)
    if pv and pv ~= "` + Tombstone + `" then
      if hit(pv) then
        redis.call("set", k, "` + Tombstone + `", "PX", math.max(redis.call("pttl", k), 1) + margin)
        announce(pv)
        count = count + 1
      else
        left = true
      end
    end
  end
  if not left then redis.call("del", res) end
  return count
end
if string.sub(v, 1, 14) == "` + SharedMarker + `" then
  redis.call("zremrangebyscore", readers, 0, now)
  redis.call("zremrangebyscore", readers, -now, "(0")
  local rs = redis.call("zrangebyscore", readers, "(0", "+inf", "WITHSCORES")
  local until_ = now
  for j = 1, #rs, 2 do
    if hit(rs[j]) then
      local u = tonumber(rs[j + 1]) + margin
      redis.call("zadd", readers, -u, rs[j])
      until_ = math.max(until_, u)
      count = count + 1
    end
  end
  if redis.call("pttl", readers) < until_ - now then redis.call("pexpire", readers, until_ - now) end
  if redis.call("zcount", readers, "(0", "+inf") == 0 then redis.call("del", res) end
  for j = 1, #rs, 2 do
    if hit(rs[j]) then announce(rs[j]) end -- each reader hears it; a waiter wakes
  end
  return count
end
if hit(v) then
  redis.call("set", res, "` + Tombstone + `", "PX", math.max(redis.call("pttl", res), 1) + margin)
  for _, m in ipairs(redis.call("zrange", queue, 0, -1)) do
    if string.sub(m, 1, #v + 1) == v .. ":" then redis.call("zrem", queue, m) end
  end
  announce(v)
  count = 1
end
return count
`

// The operator's scripts.
var (
	Inspect = newScript(inspectSrc)
	Force   = newScript(forceSrc)
)
