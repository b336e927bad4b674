-- Ends one hold of a lock; deletes the lock and announces the release when none is left.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] release channel (same hash tag as the lock),
-- ARGV[4] 'SPUBLISH' on Cluster, 'PUBLISH' elsewhere
-- Returns the hold count left (0: the lock is free), -1 when the owner does not hold the lock.
-- A hold released already leaves the count unchanged, so a retried release is harmless.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
if redis.call('HDEL', KEYS[1], 'h:' .. ARGV[2]) == 0 then
  return tonumber(redis.call('HGET', KEYS[1], 'count'))
end
local n = redis.call('HINCRBY', KEYS[1], 'count', -1)
if n <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4], ARGV[3], '')
  return 0
end
return n
