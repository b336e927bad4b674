-- Ends one hold of a lock on one node; deletes the lock and announces the release when none
-- is left.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] how to announce the release (see announce.lua of
-- internal/redislayer; the channel is KEYS[1] .. ':released', in the lock's slot)
-- ARGV[4] the token of the hold's grant, or '0' for whatever lock the owner holds
-- Returns the hold count left (0: the lock is free here), -1 when the owner does not hold the
-- lock here, -2 when it holds a later one without this hold (a token above the hold's: the
-- hold of a lock lost and taken again by its owner is not in the new one; a token not written
-- yet, 0, is no later one). The later lock is not free: it may hold another process's holds
-- of the owner. A hold that is in a lock with a later token is released: another process of
-- the owner gave the lock a new token while it held it (see fence.lua). A hold released
-- already leaves the count unchanged, so a retried release is harmless.
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'h:' .. ARGV[2], 'token')
if h[1] ~= ARGV[1] then
  return -1
end
local n = tonumber(h[2])
if not h[3] then
  if ARGV[4] ~= '0' and tonumber(h[4] or '0') > tonumber(ARGV[4]) then
    return -2
  end
  return n
end
if n <= 1 then
  redis.call('DEL', KEYS[1])
  announce(KEYS[1], ARGV[3])
  return 0
end
redis.call('HDEL', KEYS[1], 'h:' .. ARGV[2])
return redis.call('HINCRBY', KEYS[1], 'count', -1)
