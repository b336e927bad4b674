-- Extends a lock if the owner still holds it.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] TTL in ms
-- Returns 1 when extended, 0 when the owner does not hold the lock.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
