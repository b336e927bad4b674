-- Takes permits of a semaphore for an owner, enters the owner's permit once more, or, when
-- not enough permits are free of holders and of waiters ahead, puts the owner in line (or keeps
-- its place there) if it waits.
-- KEYS[1] the permits, KEYS[2] the expiries, KEYS[3] the fence counter, KEYS[4] the line,
-- KEYS[5] the places (see sem.lua)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] TTL in ms, ARGV[4] fence counter retention in ms,
-- ARGV[5] meta, ARGV[6] the limit, ARGV[7] how long a place in line lives unless renewed, in
-- ms, or 0 for one attempt that takes no place, ARGV[8] the permits to take, ARGV[9] the ID of
-- the waiter's client, which hears of a hand-over on KEYS[1] .. ':g:' .. ARGV[9], ARGV[10] the
-- TTL in ms a hand-over gives this waiter (its holder's first renewal extends it)
-- Returns {1, token, count} when the owner holds its permits after the call,
--         {0, pttl, last} when it does not: the time left of the first permit to expire, or -1
--         when the first waiter ahead in line fits in the permits free, and takes them at its
--         next attempt (a waiter ahead that does not fit waits, as this one does, for a
--         release, which hands over to both in turn, or for the first permit to expire); the last
--         token issued for the semaphore (a hand-over announced with a token up to last was
--         made before this call, and is gone by now),
--         {-1, limit} when permits are held under another limit,
--         {-2, permits} when the owner holds fewer permits than it asks for: a re-entry may
--         not take more (a read lock is not upgraded to a write lock).
local owner, hold, ttl, limit, weight = ARGV[1], sem_hold(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6]), tonumber(ARGV[8])
local now = sem_now()
sem_prune(KEYS[1], KEYS[2], now)
local mine = redis.call('HGET', KEYS[1], 'o:' .. owner)
if mine and tonumber(redis.call('ZSCORE', KEYS[2], owner) or '0') <= now then
  -- A record without an expiry (the expiries lost it: prune drops expired ones with their
  -- records) is no permit, and not counted in used, which counts the expiries' members.
  redis.call('HDEL', KEYS[1], 'o:' .. owner)
  mine = nil
end
if mine then
  local p = sem_decode(mine)
  if not p then
    return redis.error_reply(sem_foreign)
  end
  -- A re-entry under another limit is refused as any caller of it is: the owner's permit was
  -- taken under the limit its holders agreed on.
  local agreed = tonumber(redis.call('HGET', KEYS[1], 'limit'))
  if agreed and agreed ~= limit then
    return {-1, agreed}
  end
  if weight > p.w then
    return {-2, p.w}
  end
  if not p.h[hold] then
    p.c = p.c + 1
    p.h[hold] = weight
    redis.call('HSET', KEYS[1], 'o:' .. owner, cjson.encode(p))
  end
  local at = math.max(tonumber(redis.call('ZSCORE', KEYS[2], owner)), now + ttl + 1)
  redis.call('ZADD', KEYS[2], at, owner)
  sem_keep({KEYS[1], KEYS[2]}, now, at)
  redis.call('ZREM', KEYS[4], owner)
  redis.call('HDEL', KEYS[5], owner)
  return {1, tonumber(p.t), p.c}
end
if redis.call('ZCARD', KEYS[2]) > 0 then
  local agreed = tonumber(redis.call('HGET', KEYS[1], 'limit'))
  if agreed and agreed ~= limit then
    return {-1, agreed}
  end
else
  redis.call('HDEL', KEYS[1], 'used')
end
-- First come, first served: the free permits go to the live places ahead of this one first,
-- and this one takes its permits only if they fit after theirs.
local free = limit - tonumber(redis.call('HGET', KEYS[1], 'used') or '0')
local ahead, i, soon = 0, 0, false
while ahead + weight <= free do
  local m = redis.call('ZRANGE', KEYS[4], i, i)[1]
  if not m or m == owner then
    break
  end
  local e = redis.call('HGET', KEYS[5], m) or ''
  local lapse, w = string.match(e, '^(%d+) (%d+)')
  if lapse and tonumber(lapse) > now then
    if i == 0 then
      soon = tonumber(w) <= free
    end
    ahead = ahead + tonumber(w)
    i = i + 1
  else
    redis.call('ZREM', KEYS[4], m)
    redis.call('HDEL', KEYS[5], m)
  end
end
if ahead + weight <= free then
  local token, s = next_token(KEYS[3], math.max(tonumber(ARGV[4]), ttl))
  if not token then
    return redis.error_reply(s)
  end
  local h = {}
  h[hold] = weight
  redis.call('HSET', KEYS[1], 'limit', limit, 'o:' .. owner, cjson.encode({t = s, c = 1, w = weight, h = h, m = ARGV[5]}))
  redis.call('HINCRBY', KEYS[1], 'used', weight)
  redis.call('ZADD', KEYS[2], now + ttl + 1, owner)
  sem_keep({KEYS[1], KEYS[2]}, now, now + ttl + 1)
  redis.call('ZREM', KEYS[4], owner)
  redis.call('HDEL', KEYS[5], owner)
  return {1, token, 1}
end
local life = tonumber(ARGV[7])
if life > 0 then
  -- A new place goes after the last one, whatever the clock says.
  if not redis.call('ZSCORE', KEYS[4], owner) then
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]
    redis.call('ZADD', KEYS[4], math.max(now, tonumber(last or '0') + 1), owner)
  end
  redis.call('HSET', KEYS[5], owner, (now + life) .. ' ' .. weight .. ' ' .. limit .. ' ' .. ARGV[10] .. ' ' .. ARGV[9] .. ' ' .. #hold .. ' ' .. hold .. ARGV[5])
  sem_keep({KEYS[4], KEYS[5]}, now, now + life)
end
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
if soon then
  return {0, -1, last}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
if not first then
  return {0, -1, last}
end
return {0, math.max(tonumber(first) - now - 1, 0), last}
