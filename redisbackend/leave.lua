-- Takes a waiter out of line.
-- KEYS[1] the queue, KEYS[2] the waiters' entries; ARGV[1] owner ID, ARGV[2] hold ID
local member = ARGV[2] .. '@' .. ARGV[1]
redis.call('ZREM', KEYS[1], member)
return redis.call('HDEL', KEYS[2], member)
