-- Takes the lock for an owner, or re-enters it when the owner holds it already.
-- KEYS[1] the lock: a hash {owner, token, count, h:<hold id> per hold, meta}, always with a TTL
-- KEYS[2] the fence counter of the lock (same hash tag)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] TTL in ms, ARGV[4] fence counter retention in ms,
-- ARGV[5] what the holder publishes about itself ('' for nothing), kept in the field meta
-- Returns {1, token, count} when the owner holds the lock after the call,
--         {0, pttl} when another owner holds it.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  return reenter(KEYS[1], ARGV[2], ARGV[3], pttl)
end
if owner and pttl >= 0 then
  return {0, pttl}
end
return redis.error_reply('FENCELOCK the lock key holds a hash that fencelock did not write')
