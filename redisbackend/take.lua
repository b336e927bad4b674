-- next_token(fence, px) moves the fence counter of a lock or a semaphore on, keeping it px ms,
-- and returns the new token and its decimal form, or nil and an error message. The token is
-- the greater of the counter plus one and the server clock in microseconds, so it keeps
-- increasing after the counter expires or a failover loses the last increments.
local function next_token(fence, px)
  local t = redis.call('TIME')
  -- The clock in microseconds, its digits joined: half the server time of string.format
  -- ('%.0f'), which this took before.
  local s = t[1] .. string.sub('00000' .. t[2], -6)
  local now = tonumber(s)
  -- One call in the common case: write the clock and read what it replaced. Only when the
  -- counter is at or past the clock (several takes in one microsecond, or a clock that stepped
  -- back) does the token go one past the counter, in a second write.
  local old = redis.call('SET', fence, s, 'PX', px, 'GET')
  local token = now
  if old then
    local last = tonumber(old)
    if last == nil then
      redis.call('SET', fence, old, 'PX', px)
      return nil, 'FENCELOCK the fence key holds a value fencelock did not write'
    end
    if last >= now then
      token = last + 1
      s = string.format('%.0f', token)
      redis.call('SET', fence, s, 'PX', px)
    end
  end
  return token, s
end

-- take(lock, fence, owner, hold, ttl, retention, meta, q, hash) gives the free lock to owner
-- and returns its fencing token, or nil and an error message. With no metadata, no line (q
-- false), hash false (the caller's WithPlainLocks) and a hold ID without white space (which
-- the plain form could not tell from the owner's) the lock is a plain key, one SET; else the
-- hash, with q set when q (see lock.lua). This fragment and next_token open the scripts
-- that take locks (see scripts.go).
local function take(lock, fence, owner, hold, ttl, retention, meta, q, hash)
  local token, s = next_token(fence, math.max(tonumber(retention), tonumber(ttl)))
  if not token then
    return nil, s
  end
  if meta == '' and not q and not hash and not string.find(hold, '%s') then
    redis.call('SET', lock, s .. ' ' .. hold .. ' ' .. owner, 'PX', ttl)
    return token
  end
  redis.call('HSET', lock, 'owner', owner, 'token', s, 'count', 1, 'h:' .. hold, 1)
  if meta ~= '' then
    redis.call('HSET', lock, 'meta', meta)
  end
  if q then
    redis.call('HSET', lock, 'q', 1)
  end
  redis.call('PEXPIRE', lock, ttl)
  return token
end
