-- Writes a fencing token back to one node: raises the fence counter to it unless the counter
-- is already there or beyond. Where the owner holds the lock here, the lock takes the token
-- and keeps this acquisition's hold alone: a new token is a new lock, and holds the owner
-- had here before belong to a lock it lost (a key that a release did not reach).
-- KEYS[1] the lock hash, KEYS[2] the fence counter (same hash tag)
-- ARGV[1] owner ID, ARGV[2] the token, ARGV[3] the counter's retention in ms,
-- ARGV[4] the hold ID of the acquisition
-- Returns {1, 0} when the counter now holds the token,
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
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  local hold = 'h:' .. ARGV[4]
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 2) == 'h:' and f ~= hold then
      redis.call('HDEL', KEYS[1], f)
    end
  end
  redis.call('HSET', KEYS[1], 'token', ARGV[2], 'count', 1, hold, 1)
end
return {1, 0}
