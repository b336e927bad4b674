-- The rest of release.lua: the lock is a hash (GET failed), another plain key, or none.
local hold = ARGV[2] or string.match(ARGV[1], '^%d+ (%S*)')
local token = string.match(ARGV[1], '^%d+')
local owner = string.sub(ARGV[1], #token + #hold + 3)
-- v is release.lua's GET of the lock: a hash (the GET raised WRONGTYPE, the usual case here:
-- re-entry, metadata, a line) is read with HMGET at once, as read_lock would after a GET of
-- its own; anything else is read by read_lock, which tells a plain key from a foreign one.
local h
if type(v) == 'table' then
  h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'h:' .. hold, 'q', 'token')
else
  h = read_lock(KEYS[1], 'owner', 'count', 'h:' .. hold, 'q', 'token')
end
if h[1] ~= owner or (token ~= '0' and h[5] ~= token) then
  return -1
end
local n = tonumber(h[2])
if not h[3] then
  return n
end
if n > 1 then
  redis.call('HDEL', KEYS[1], 'h:' .. hold)
  return redis.call('HINCRBY', KEYS[1], 'count', -1)
end
redis.call('DEL', KEYS[1])
-- The line is looked at only when a waiter joined it while this lock was held (q).
if h[4] then
  local err = handover(KEYS[1], KEYS[2], KEYS[3], KEYS[4], RETENTION, HOW, HASH)
  if err then
    return redis.error_reply(err)
  end
else
  announce(KEYS[1], HOW)
end
return 0
