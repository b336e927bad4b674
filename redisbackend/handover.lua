-- handover gives the free lock to the first live waiter in line (see queue.lua) and announces
-- the grant to the waiter's client on <lock>:g:<client id> as 'g <token> <hold id>@<owner>',
-- and to whoever watches the lock's holder (Election.Observe) on <lock>:released. With no live
-- waiter it announces the release (see announce.lua of internal/redislayer); how says how to
-- publish either. hash writes the lock it hands over as a hash (see take). It returns nil, or
-- an error message.
local function handover(lock, fence, line, entries, retention, how, hash)
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
          local token, err = take(lock, fence, owner, hold, ttl, retention, meta, redis.call('EXISTS', line) == 1, hash)
          if not token then
            return err
          end
          redis.call(how == 'SHARDNUMSUB' and 'SPUBLISH' or 'PUBLISH', lock .. ':g:' .. client, 'g ' .. string.format('%.0f', token) .. ' ' .. head)
          announce(lock, how)
          return nil
        end
      end
    end
  end
  announce(lock, how)
  return nil
end

