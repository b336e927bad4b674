-- Ends one hold of an owner's permit of a semaphore. When none is left, frees the permit; when
-- the holds left take fewer permits (a write lock released under a read lock), gives back the
-- difference. Either way it hands the permits freed to the waiters first in line that fit
-- (sem_handover), and announces the release to clients that take no hand-over.
-- KEYS[1] the permits, KEYS[2] the expiries, KEYS[3] the fence counter, KEYS[4] the line,
-- KEYS[5] the places (see sem.lua)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] how to announce a release (see announce),
-- ARGV[4] fence counter retention in ms, ARGV[5] the token of the hold's grant, or '0' for
-- whatever permit the owner holds
-- Returns the hold count left (0: the permit is free), -1 when the owner holds no permit, or a
-- later one: the hold of a permit lost and taken again by its owner is not in the new one. A
-- hold released already leaves the count unchanged, so a retried release is harmless.
local owner, hold = ARGV[1], sem_hold(ARGV[2])
local now = sem_now()
local p, at, mine = sem_mine(KEYS[1], KEYS[2], owner, now)
if not p then
  return at or -1
end
if ARGV[5] ~= '0' and p.t ~= ARGV[5] then
  return -1
end
if not p.h[hold] then
  return p.c
end
local left = 0
if p.c > 1 then
  p.c = p.c - 1
  p.h[hold] = nil
  local w = sem_weight(p.h)
  local freed = p.w - w
  p.w = w
  redis.call('HSET', KEYS[1], 'o:' .. owner, cjson.encode(p))
  if freed == 0 then
    return p.c
  end
  redis.call('HINCRBY', KEYS[1], 'used', -freed)
  left = p.c
else
  sem_drop(KEYS[1], KEYS[2], owner, mine)
end
local err = sem_handover(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[4], ARGV[3], now)
if err then
  return redis.error_reply(err)
end
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
end
announce(KEYS[1], ARGV[3])
return left
