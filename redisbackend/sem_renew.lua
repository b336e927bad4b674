-- Extends an owner's permit of a semaphore if it still holds it under the token of the grant.
-- KEYS[1] the permits, KEYS[2] the expiries (see sem.lua)
-- ARGV as renew.lua's: owner ID, TTL in ms, the token ('0' for any), the holds the caller has
-- of the permit when it sets the TTL (Lock.Refresh), or '0' to extend only
-- Returns 1 when extended, 0 when the owner holds no such permit.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = sem_now()
local p, at = sem_mine(KEYS[1], KEYS[2], owner, now)
if not p then
  return at or 0
end
if ARGV[3] ~= '0' and p.t ~= ARGV[3] then
  return 0
end
local holds = tonumber(ARGV[4])
if (holds > 0 and p.c <= holds) or at < now + ttl + 1 then
  redis.call('ZADD', KEYS[2], now + ttl + 1, owner)
  sem_keep({KEYS[1], KEYS[2]}, now, now + ttl + 1)
end
return 1
