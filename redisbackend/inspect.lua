-- Reads a lock without changing it.
-- KEYS[1] the lock (see lock.lua), KEYS[2] its fence counter
-- Returns {owner or false, count, token, pttl, last fence counter or false, meta or false}.
local h = read_lock(KEYS[1], 'owner', 'count', 'token', 'meta')
return {h[1], tonumber(h[2] or '0'), tonumber(h[3] or '0'), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), h[4]}
