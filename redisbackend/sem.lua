-- The functions of the semaphore scripts. A semaphore is kept in two keys of one hash tag:
--   the permits, a hash {limit, used = the permits taken, o:<owner> per holder: cjson {t =
--   token (decimal), c = hold count, w = the permits it takes, h = {<hold id, '-' for none> =
--   the permits that hold asked for, ...}, m = meta}}; a holder takes as many permits as the
--   largest of its holds asked for,
--   the expiries, a sorted set of the owners of permits, scored by when each permit expires
--   (server clock, ms): a millisecond past its TTL, so that a permit is never counted out
--   before the holder's deadline, which counts from a send before the script ran.
-- A permit is held while its expiry is in the future; both keys live as long as the longest-
-- lived permit, and no longer. Waiters wait in a line of two more keys, as the lock's line
-- does: a sorted set of owners scored in order of arrival, and a hash owner -> '<when the place
-- lapses unless renewed (ms)> <the permits it asks for> <the limit> <the TTL a hand-over gives
-- it (ms)> <its client's ID> <n> <its hold ID, n bytes><meta>' (a client before December 2026
-- wrote the first two alone, and hears of releases on <permits>:released instead).

-- sem_now returns the server clock in ms.
local function sem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- sem_drop removes owner's permit, of record rec (nil when it has none), from the permits and
-- the expiries, and gives back what it took.
local function sem_drop(permits, expiries, owner, rec)
  if rec then
    local ok, p = pcall(cjson.decode, rec)
    local w = ok and type(p) == 'table' and tonumber(p.w) or 1
    redis.call('HINCRBY', permits, 'used', -w)
    redis.call('HDEL', permits, 'o:' .. owner)
  end
  redis.call('ZREM', expiries, owner)
end

-- sem_prune removes the permits that expired by now.
local function sem_prune(permits, expiries, now)
  local dead = redis.call('ZRANGEBYSCORE', expiries, '-inf', now)
  for _, o in ipairs(dead) do
    sem_drop(permits, expiries, o, redis.call('HGET', permits, 'o:' .. o))
  end
end

-- sem_weight is the permits a holder with holds h takes: the most any of them asked for.
local function sem_weight(h)
  local w = 0
  for _, n in pairs(h) do
    w = math.max(w, tonumber(n) or 1)
  end
  return w
end

-- sem_hold is the name of hold id in a permit record.
local function sem_hold(id)
  if id == '' then
    return '-'
  end
  return id
end

-- sem_decode returns the permit record rec, or nil when it is not one fencelock wrote.
local function sem_decode(rec)
  local ok, p = pcall(cjson.decode, rec)
  if not ok or type(p) ~= 'table' or type(p.t) ~= 'string' or type(p.c) ~= 'number' or type(p.h) ~= 'table' then
    return nil
  end
  p.w = tonumber(p.w) or 1
  return p
end

local sem_foreign = 'FENCELOCK the semaphore key holds a permit that fencelock did not write'

-- sem_mine reads owner's live permit: its record, decoded, and its expiry, or nil when the
-- owner holds none (pruning what expired), or nil and an error reply when the record is not
-- one fencelock wrote.
local function sem_mine(permits, expiries, owner, now)
  local at = tonumber(redis.call('ZSCORE', expiries, owner) or '0')
  local rec = redis.call('HGET', permits, 'o:' .. owner)
  if at <= now or not rec then
    sem_prune(permits, expiries, now)
    return nil
  end
  local p = sem_decode(rec)
  if not p then
    return nil, redis.error_reply(sem_foreign)
  end
  return p, at, rec
end

-- sem_keep makes keys live at least until the server clock reads at, now being now.
local function sem_keep(keys, now, at)
  for _, k in ipairs(keys) do
    if redis.call('PTTL', k) < at - now then
      redis.call('PEXPIRE', k, at - now)
    end
  end
end

-- sem_handover gives free permits to the live waiters first in line, in order, for as long as
-- they fit (none passes one before it), and tells each waiter's client on
-- <permits>:g:<client> as 'g <token> <hold> <owner>': the hold the permit was given to, of the
-- owner's waiters that share its place (goroutines under one WithOwner), so that one of them
-- alone takes it, and the others enter it at their next attempt. (Clients before December
-- 2026 read 'g <token> <owner>', and take this for another owner's: they learn of the grant at
-- their next attempt.) It stops at a live place of a client that takes no hand-over (the
-- announcement of the release tells that one), and at a waiter of another limit (its next
-- attempt says so). A place whose owner holds a permit already is dropped: its waiter enters
-- that permit at its next attempt. how is how releases are announced (see announce.lua of
-- internal/redislayer): 'SHARDNUMSUB' publishes with SPUBLISH, the others with PUBLISH. It
-- returns nil, or an error message.
local function sem_handover(permits, expiries, fence, line, places, retention, how, now)
  if redis.call('EXISTS', line) == 0 then
    return nil
  end
  sem_prune(permits, expiries, now)
  local limit, used = nil, 0
  if redis.call('ZCARD', expiries) > 0 then
    limit = tonumber(redis.call('HGET', permits, 'limit'))
    used = tonumber(redis.call('HGET', permits, 'used') or '0')
  else
    redis.call('HDEL', permits, 'used') -- as sem_acquire does: no permit, nothing used
  end
  while true do
    local m = redis.call('ZRANGE', line, 0, 0)[1]
    if not m then
      return nil
    end
    local e = redis.call('HGET', places, m) or ''
    local lapse = tonumber(string.match(e, '^(%d+)') or '0')
    if lapse > now then
      local w, l, handed, client, n, rest = string.match(e, '^%d+ (%d+) (%d+) (%d+) (%S+) (%d+) (.*)$')
      if not w then
        return nil
      end
      w, l, handed, n = tonumber(w), tonumber(l), tonumber(handed), tonumber(n)
      limit = limit or l
      if redis.call('HEXISTS', permits, 'o:' .. m) == 0 then
        if l ~= limit or used + w > limit then
          return nil
        end
        local token, s = next_token(fence, math.max(tonumber(retention), handed))
        if not token then
          return s
        end
        local hold = string.sub(rest, 1, n)
        local h = {}
        h[hold] = w
        redis.call('HSET', permits, 'limit', limit, 'o:' .. m, cjson.encode({t = s, c = 1, w = w, h = h, m = string.sub(rest, n + 1)}))
        redis.call('HINCRBY', permits, 'used', w)
        used = used + w
        redis.call('ZADD', expiries, now + handed + 1, m)
        sem_keep({permits, expiries}, now, now + handed + 1)
        redis.call(how == 'SHARDNUMSUB' and 'SPUBLISH' or 'PUBLISH', permits .. ':g:' .. client, 'g ' .. s .. ' ' .. hold .. ' ' .. m)
      end
    end
    redis.call('ZREM', line, m)
    redis.call('HDEL', places, m)
  end
end
