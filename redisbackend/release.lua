-- Ends one hold of a lock. When none is left, hands the lock to the first live waiter in line
-- and announces the grant, or deletes the lock and announces the release.
-- KEYS[1] the lock hash, KEYS[2] its fence counter, KEYS[3] the queue, KEYS[4] the waiters'
-- entries (see queue.lua)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] 'SPUBLISH' on Cluster, 'PUBLISH' elsewhere,
-- ARGV[4] fence counter retention in ms
-- The channel is KEYS[1] .. ':released', in the lock's hash slot; a grant's message is
-- 'g <token> <hold id>@<owner>', a release's is empty.
-- Returns the hold count left (0: the lock is no longer this owner's), -1 when the owner does
-- not hold the lock. A hold released already leaves the count unchanged, so a retried release
-- is harmless.
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'h:' .. ARGV[2])
if h[1] ~= ARGV[1] then
  return -1
end
local n = tonumber(h[2])
if not h[3] then
  return n
end
if n > 1 then
  redis.call('HDEL', KEYS[1], 'h:' .. ARGV[2])
  return redis.call('HINCRBY', KEYS[1], 'count', -1)
end
redis.call('DEL', KEYS[1])
local channel = KEYS[1] .. ':released'
if redis.call('EXISTS', KEYS[3]) == 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not head then
      break
    end
    local e = redis.call('HGET', KEYS[4], head)
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
    if e then
      local deadline, ttl, meta = string.match(e, '^(%d+) (%d+) (.*)$')
      if deadline and tonumber(deadline) > now then
        local hold, owner = string.match(head, '^([^@]*)@(.*)$')
        local token, err = take(KEYS[1], KEYS[2], owner, hold, ttl, ARGV[4], meta)
        if not token then
          return redis.error_reply(err)
        end
        redis.call(ARGV[3], channel, 'g ' .. string.format('%.0f', token) .. ' ' .. head)
        return 0
      end
    end
  end
end
redis.call(ARGV[3], channel, '')
return 0
