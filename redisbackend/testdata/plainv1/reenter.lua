-- reenter adds a hold to a lock the owner holds already and returns {1, token, count}. A hold
-- ID seen before is a retried acquire: it does not count twice.
local function reenter(lock, hold, ttl, pttl)
  local n
  if redis.call('HSETNX', lock, 'h:' .. hold, 1) == 1 then
    n = redis.call('HINCRBY', lock, 'count', 1)
  else
    n = tonumber(redis.call('HGET', lock, 'count'))
  end
  if pttl < tonumber(ttl) then
    redis.call('PEXPIRE', lock, ttl)
  end
  return {1, tonumber(redis.call('HGET', lock, 'token')), n}
end

