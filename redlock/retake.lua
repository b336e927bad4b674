-- Takes back a lock on a node that lost it, for an owner that a majority of nodes still
-- confirmed: the key is created again only if it is still free; the fence counter is raised
-- to the owner's token, so that a node restarted empty knows it again.
-- KEYS[1] the lock hash, KEYS[2] the fence counter (same hash tag)
-- ARGV[1] owner ID, ARGV[2] TTL in ms, ARGV[3] the owner's token, ARGV[4] its hold count,
-- ARGV[5] the counter's retention in ms, ARGV[6] the holder's meta ('' for none)
-- Returns 1 when the owner holds the lock here after the call, 0 when another owner does.
-- The hold IDs are not known here, so the hash keeps none: a release of one hold leaves the
-- count as it is, and the last release, decided by the majority, deletes the key (drop.lua).
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if owner or redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', ARGV[3], 'count', ARGV[4])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'meta', ARGV[6])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter ~= nil and counter < tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[5])
end
return 1
