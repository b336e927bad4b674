-- Lists the live waiters in the line of a lock (see queue.lua), first in line first.
-- KEYS[1] the line, KEYS[2] the waiters' entries
-- Returns a flat list: member ('<hold id>@<owner>'), metadata, member, metadata...
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local e = redis.call('HGET', KEYS[2], m)
  if e then
    local deadline, _, _, meta = string.match(e, '^(%d+) (%d+) (%S+) (.*)$')
    if deadline and tonumber(deadline) > now then
      out[#out + 1] = m
      out[#out + 1] = meta
    end
  end
end
return out
