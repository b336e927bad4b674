-- Ends one hold of an owner's permit of a semaphore. When none is left, frees the permit; when
-- the holds left take fewer permits (a write lock released under a read lock), gives back the
-- difference. Either way it announces it to the waiters.
-- KEYS[1] the permits, KEYS[2] the expiries (see sem.lua)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] 'SPUBLISH' on Cluster, 'PUBLISH' elsewhere,
-- ARGV[4] how to count the listeners of a release (see announce)
-- Returns the hold count left (0: the permit is free), -1 when the owner holds no permit. A
-- hold released already leaves the count unchanged, so a retried release is harmless.
local owner, hold = ARGV[1], sem_hold(ARGV[2])
local now = sem_now()
local p, at, mine = sem_mine(KEYS[1], KEYS[2], owner, now)
if not p then
  return at or -1
end
if not p.h[hold] then
  return p.c
end
if p.c > 1 then
  p.c = p.c - 1
  p.h[hold] = nil
  local w = sem_weight(p.h)
  local freed = p.w - w
  p.w = w
  redis.call('HSET', KEYS[1], 'o:' .. owner, cjson.encode(p))
  if freed > 0 then
    redis.call('HINCRBY', KEYS[1], 'used', -freed)
    announce(KEYS[1], ARGV[3], ARGV[4])
  end
  return p.c
end
sem_drop(KEYS[1], KEYS[2], owner, mine)
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
end
announce(KEYS[1], ARGV[3], ARGV[4])
return 0
