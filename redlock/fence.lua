-- Writes a fencing token back to one node: raises the fence counter to it unless the counter
-- is already there or beyond. Where the owner holds the lock here, the lock takes the token and
-- this acquisition's hold. Other holds of the owner here stay, whatever the acquisition saw:
-- one may be a live hold of the same owner in another process, whose acquire call landed here
-- after this acquisition's (TestTokenRoundKeepsAHoldThatLandedAfterItsAcquire), and one left
-- by a lost lock only keeps the key here until its TTL.
-- KEYS[1] the lock hash, KEYS[2] the fence counter (same hash tag)
-- ARGV[1] owner ID, ARGV[2] the token, ARGV[3] the counter's retention in ms,
-- ARGV[4] the hold ID of the acquisition
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
redis.call('HSET', KEYS[1], 'token', ARGV[2])
if redis.call('HSETNX', KEYS[1], 'h:' .. ARGV[4], 1) == 1 then
  return {1, redis.call('HINCRBY', KEYS[1], 'count', 1)}
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'count'))}
