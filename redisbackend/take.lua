-- take(lock, fence, owner, hold, ttl, retention, meta) gives the free lock to owner and returns
-- its fencing token, or nil and an error message. The token is the greater of the counter plus
-- one and the server clock in microseconds, so it keeps increasing after the counter expires
-- or a failover loses the last increments. This fragment opens the scripts that take locks
-- (see scripts.go).
local function take(lock, fence, owner, hold, ttl, retention, meta)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', fence) or '0')
  if last == nil then
    return nil, 'FENCELOCK the fence key holds a value fencelock did not write'
  end
  local token = math.max(now, last + 1)
  local s = string.format('%.0f', token)
  redis.call('SET', fence, s, 'PX', math.max(tonumber(retention), tonumber(ttl)))
  redis.call('HSET', lock, 'owner', owner, 'token', s, 'count', 1, 'h:' .. hold, 1)
  if meta ~= '' then
    redis.call('HSET', lock, 'meta', meta)
  end
  redis.call('PEXPIRE', lock, ttl)
  return token
end

-- grant is take for a script's reply: {1, token, 1} when owner holds the lock, or the error.
local function grant(lock, fence, owner, hold, ttl, retention, meta)
  local token, err = take(lock, fence, owner, hold, ttl, retention, meta)
  if not token then
    return redis.error_reply(err)
  end
  return {1, token, 1}
end
