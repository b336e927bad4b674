-- Records the token of a lock that a majority of nodes agree on, on one node that granted the
-- acquisition with another token (it had lost the key and took it afresh, its token write was
-- lost, or it kept an old lock of the owner that a release did not reach): the owner's lock
-- here takes the token, its holds stay as they are, and the fence counter is raised to the
-- token if it is below.
-- KEYS[1] the lock hash, KEYS[2] the fence counter (same hash tag)
-- ARGV[1] owner ID, ARGV[2] the token, ARGV[3] the counter's retention in ms
-- Returns 1 when the token is recorded, 0 when the owner does not hold the lock here.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[2])
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter ~= nil and counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
