package script

// What an operator lists: a page of a node's keys that hold a lock
// (List), found with SCAN and read as Inspect reads them.

// scanSrc reads one page of a node's keys. ARGV: the SCAN cursor, the
// MATCH pattern, the COUNT. It looks at string keys only (TYPE string:
// a resource's key is one), and keeps those whose value is a lock's: 32
// hex characters, alone (node-redlock's) or followed by "@" and an
// identity, or a semaphore's or a shared lock's marker. A tombstone, a
// counter or any other string is left out. It answers {the next cursor,
// how many keys the page held, the keys kept}.
const scanSrc = `
local page = redis.call("scan", ARGV[1], "match", ARGV[2], "count", ARGV[3], "type", "string")
local kept = {}
for _, k in ipairs(page[2]) do
  local v = redis.call("get", k)
  if v and (string.sub(v, 1, 16) == "` + PermitsMarker + `" or string.sub(v, 1, 14) == "` + SharedMarker + `" or
      #v >= 32 and (#v == 32 or string.sub(v, 33, 33) == "@") and not string.find(string.sub(v, 1, 32), "[^%x]")) then
    kept[#kept + 1] = k
  end
end
return {page[1], #page[2], kept}
`

// Scan is the list's script.
var Scan = newScript(scanSrc)
