-- Takes the lock on one node for an owner, or re-enters it when the owner holds it already, and
-- reads the node's fence counter and clock for the token round that follows a quorum.
-- KEYS[1] the lock: a hash {owner, token, count, h:<hold id> per hold, meta}, always with a TTL
-- KEYS[2] the fence counter of the lock (same hash tag)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] TTL in ms,
-- ARGV[4] what the holder publishes about itself ('' for nothing), kept in the field meta,
-- ARGV[5] the token the client proposes for a first acquisition ('0' for none), ARGV[6] the
-- fence counter's retention in ms
-- Returns {1, count, token, counter, now} when the owner holds the lock on this node after the
--         call. On a first acquisition, token is the proposal when it was above the counter,
--         which now holds it; else 0, until the token round writes one;
--         {0, pttl, counter, now} when another owner holds it.
-- counter is the fence counter before the call (0 when absent), now the server clock in µs.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter == nil then
  return redis.error_reply('FENCELOCK the fence key holds a value fencelock did not write')
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  local token = tonumber(ARGV[5])
  if token > counter then
    redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
  else
    token = 0
  end
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'count', 1, 'h:' .. ARGV[2], 1)
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'meta', ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, 1, token, counter, now}
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
  return {1, n, tonumber(redis.call('HGET', KEYS[1], 'token') or '0'), counter, now}
end
if owner and pttl >= 0 then
  return {0, pttl, counter, now}
end
return redis.error_reply('FENCELOCK the lock key holds a hash that fencelock did not write')
