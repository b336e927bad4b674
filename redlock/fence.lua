-- Writes a fencing token back to one node: raises the fence counter to it unless the counter
-- is already there or beyond. Where the owner holds the lock here, the lock takes the token and
-- this acquisition's hold. With ARGV[5] '1' it keeps that hold alone: the caller knows that
-- the lock the other holds belong to was not on a majority (a key that a release did not
-- reach, of a lock lost since). With '0' the other holds stay: they may be live holds of the
-- same owner, in another process, of a lock still held on a majority that this acquisition
-- could not confirm.
-- KEYS[1] the lock hash, KEYS[2] the fence counter (same hash tag)
-- ARGV[1] owner ID, ARGV[2] the token, ARGV[3] the counter's retention in ms,
-- ARGV[4] the hold ID of the acquisition, ARGV[5] '1' to drop the other holds, '0' to keep them
-- Returns {1, count} when the counter now holds the token, with the owner's hold count here
--         (0 when another owner, or no one, holds the lock here),
--         {0, counter} when the counter was at or beyond it already (nothing is written).
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter == nil then
  return redis.error_reply('FENCELOCK the fence key holds a value fencelock did not write')
end
local token = tonumber(ARGV[2])
if counter >= token then
  return {0, counter}
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return {1, 0}
end
local hold = 'h:' .. ARGV[4]
if ARGV[5] == '1' then
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 2) == 'h:' and f ~= hold then
      redis.call('HDEL', KEYS[1], f)
    end
  end
  redis.call('HSET', KEYS[1], 'token', ARGV[2], 'count', 1, hold, 1)
  return {1, 1}
end
redis.call('HSET', KEYS[1], 'token', ARGV[2])
if redis.call('HSETNX', KEYS[1], hold, 1) == 1 then
  return {1, redis.call('HINCRBY', KEYS[1], 'count', 1)}
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'count'))}
