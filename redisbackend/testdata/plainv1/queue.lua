-- Takes the lock for a waiter whose turn it is, or puts the waiter in line (or keeps its place
-- there) until a release hands the lock over.
-- KEYS[1] the lock (see lock.lua), KEYS[2] its fence counter,
-- KEYS[3] the queue: a sorted set of waiters <hold id>@<owner>, scored in order of arrival,
-- KEYS[4] the waiters' entries: a hash <hold id>@<owner> -> '<deadline ms> <TTL ms> <client> <meta>',
-- where TTL is the one a release hands the lock over with (ARGV[8])
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] TTL in ms, ARGV[4] fence counter retention in ms,
-- ARGV[5] meta, ARGV[6] how long the entry lives without being renewed, in ms, ARGV[7] the ID
-- of the waiter's client, which hears of its grant on KEYS[1] .. ':g:' .. ARGV[7], ARGV[8] the
-- TTL in ms a release hands the lock to this waiter with (its holder's first renewal extends it),
-- ARGV[9] 'hash' to write the lock as a hash whatever it holds (WithPlainLocks(false)), else ''
-- Returns {1, token, count} when the owner holds the lock after the call,
--         {0, pttl, last} when it waits: the holder's PTTL, or -1 when the lock is free but an
--         earlier waiter, still alive, is next; and the last token issued for the lock. A
--         hand-over to this waiter announced with a token up to last was made before this call
--         and is gone by now (see AcquireQueued).
local member = ARGV[2] .. '@' .. ARGV[1]
-- Neither the lock nor a line, the usual case: the lock is the caller's at once.
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], false, ARGV[9] == 'hash')
end
local pttl = redis.call('PTTL', KEYS[1])
local plain
if pttl ~= -2 then
  local h
  h, plain = read_lock(KEYS[1], 'owner')
  local owner = h[1]
  if owner == ARGV[1] then
    -- Re-entry, or a release handed the lock to this very wait.
    redis.call('ZREM', KEYS[3], member)
    redis.call('HDEL', KEYS[4], member)
    if plain then
      to_hash(KEYS[1], plain)
    end
    return reenter(KEYS[1], ARGV[2], ARGV[3], pttl)
  end
  if not owner or pttl < 0 then
    return redis.error_reply('FENCELOCK the lock key holds a ' .. (plain and 'string' or 'hash') .. ' that fencelock did not write')
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if pttl == -2 then
  -- The first live waiter's turn.
  local head
  while true do
    head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not head or head == member then
      break
    end
    local e = redis.call('HGET', KEYS[4], head)
    if e and tonumber(string.match(e, '^(%d+)')) > now then
      break
    end
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
  end
  if not head or head == member then
    redis.call('ZREM', KEYS[3], member)
    redis.call('HDEL', KEYS[4], member)
    return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], redis.call('EXISTS', KEYS[3]) == 1, ARGV[9] == 'hash')
  end
  pttl = -1
end
local life = tonumber(ARGV[6])
-- A new place goes after the last one, whatever the clock says: arrivals in one millisecond,
-- or a clock stepped back, must not reorder the line.
if not redis.call('ZSCORE', KEYS[3], member) then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', KEYS[3], math.max(now, tonumber(last or '0') + 1), member)
end
redis.call('HSET', KEYS[4], member, (now + life) .. ' ' .. ARGV[8] .. ' ' .. ARGV[7] .. ' ' .. ARGV[5])
if pttl >= 0 then
  -- The holder's release hands the lock over: it looks at the line only when told to.
  if plain then
    to_hash(KEYS[1], plain)
  end
  redis.call('HSET', KEYS[1], 'q', 1)
end
-- The line outlives its longest-lived place, and no longer.
for i = 3, 4 do
  if redis.call('PTTL', KEYS[i]) < life then
    redis.call('PEXPIRE', KEYS[i], life)
  end
end
return {0, pttl, tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
