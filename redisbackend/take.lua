-- take(lock, fence, owner, hold, ttl, retention, meta) gives the free lock to owner and returns
-- its fencing token, or nil and an error message. The token is the greater of the counter plus
-- one and the server clock in microseconds, so it keeps increasing after the counter expires
-- or a failover loses the last increments. This fragment opens the scripts that take locks.
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

-- handover gives the free lock to the first live waiter in line (see queue.lua) and announces
-- the grant to the waiter's client on <lock>:g:<client id> as 'g <token> <hold id>@<owner>'.
-- With no live waiter it announces the release on <lock>:released. It returns nil, or an error
-- message.
local function handover(lock, fence, line, entries, retention, publish)
  if redis.call('EXISTS', line) == 1 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    while true do
      local head = redis.call('ZRANGE', line, 0, 0)[1]
      if not head then
        break
      end
      local e = redis.call('HGET', entries, head)
      redis.call('ZREM', line, head)
      redis.call('HDEL', entries, head)
      if e then
        local deadline, ttl, client, meta = string.match(e, '^(%d+) (%d+) (%S+) (.*)$')
        if deadline and tonumber(deadline) > now then
          local hold, owner = string.match(head, '^([^@]*)@(.*)$')
          local token, err = take(lock, fence, owner, hold, ttl, retention, meta)
          if not token then
            return err
          end
          redis.call(publish, lock .. ':g:' .. client, 'g ' .. string.format('%.0f', token) .. ' ' .. head)
          return nil
        end
      end
    end
  end
  redis.call(publish, lock .. ':released', '')
  return nil
end

