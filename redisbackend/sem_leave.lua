-- Takes an owner out of a semaphore's line.
-- KEYS[1] the line, KEYS[2] the places (see sem.lua)
-- ARGV[1] owner ID
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
