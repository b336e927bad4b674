-- The functions of the semaphore scripts. A semaphore is kept in two keys of one hash tag:
--   the permits, a hash {limit, o:<owner> per permit held: cjson {t = token (decimal), c = hold
--   count, h = {<hold id> = 1, ...}, m = meta}},
--   the expiries, a sorted set of the owners of permits, scored by when each permit expires
--   (server clock, ms): a millisecond past its TTL, so that a permit is never counted out
--   before the holder's deadline, which counts from a send before the script ran.
-- A permit is held while its expiry is in the future; both keys live as long as the longest-
-- lived permit, and no longer. Waiters wait in a line of two more keys, as the lock's line
-- does: a sorted set of owners scored in order of arrival, and a hash owner -> when the place
-- lapses unless renewed (ms).

-- sem_now returns the server clock in ms.
local function sem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- sem_prune removes the permits that expired by now.
local function sem_prune(permits, expiries, now)
  local dead = redis.call('ZRANGEBYSCORE', expiries, '-inf', now)
  for _, o in ipairs(dead) do
    redis.call('HDEL', permits, 'o:' .. o)
    redis.call('ZREM', expiries, o)
  end
end

-- sem_decode returns the permit record rec, or nil when it is not one fencelock wrote.
local function sem_decode(rec)
  local ok, p = pcall(cjson.decode, rec)
  if not ok or type(p) ~= 'table' or type(p.t) ~= 'string' or type(p.c) ~= 'number' or type(p.h) ~= 'table' then
    return nil
  end
  return p
end

local sem_foreign = 'FENCELOCK the semaphore key holds a permit that fencelock did not write'

-- sem_keep makes keys live at least until the server clock reads at, now being now.
local function sem_keep(keys, now, at)
  for _, k in ipairs(keys) do
    if redis.call('PTTL', k) < at - now then
      redis.call('PEXPIRE', k, at - now)
    end
  end
end
