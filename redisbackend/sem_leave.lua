-- Takes an owner out of a semaphore's line, and hands the permits it was waiting ahead of to
-- the waiters behind it that now fit (sem_handover).
-- KEYS[1] the permits, KEYS[2] the expiries, KEYS[3] the fence counter, KEYS[4] the line,
-- KEYS[5] the places (see sem.lua)
-- ARGV[1] owner ID, ARGV[2] how releases are announced, which says how grants are published
-- (see sem_handover), ARGV[3] fence counter retention in ms
if redis.call('ZREM', KEYS[4], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[5], ARGV[1])
local err = sem_handover(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[2], sem_now())
if err then
  return redis.error_reply(err)
end
return 1
