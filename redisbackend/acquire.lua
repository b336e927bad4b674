-- Takes the lock for an owner, or re-enters it when the owner holds it already.
-- KEYS[1] the lock: a hash {owner, token, count, h:<hold id> per hold, meta}, always with a TTL
-- KEYS[2] the fence counter of the lock (same hash tag)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] TTL in ms, ARGV[4] fence counter retention in ms,
-- ARGV[5] what the holder publishes about itself ('' for nothing), kept in the field meta
-- Returns {1, token, count} when the owner holds the lock after the call,
--         {0, pttl} when another owner holds it.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  -- Free. The token is the greater of the counter plus one and the server clock in
  -- microseconds, so it keeps increasing after the counter expires or a failover loses the
  -- last increments.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  if last == nil then
    return redis.error_reply('FENCELOCK the fence key holds a value fencelock did not write')
  end
  local token = math.max(now, last + 1)
  local s = string.format('%.0f', token)
  redis.call('SET', KEYS[2], s, 'PX', math.max(tonumber(ARGV[4]), tonumber(ARGV[3])))
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', s, 'count', 1, 'h:' .. ARGV[2], 1)
  if ARGV[5] ~= '' then
    redis.call('HSET', KEYS[1], 'meta', ARGV[5])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, token, 1}
end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  -- A hold ID seen before is a retried acquire: it does not count twice.
  local n
  if redis.call('HSETNX', KEYS[1], 'h:' .. ARGV[2], 1) == 1 then
    n = redis.call('HINCRBY', KEYS[1], 'count', 1)
  else
    n = tonumber(redis.call('HGET', KEYS[1], 'count'))
  end
  if pttl < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'token')), n}
end
if owner and pttl >= 0 then
  return {0, pttl}
end
return redis.error_reply('FENCELOCK the lock key holds a hash that fencelock did not write')
