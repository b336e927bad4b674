-- Ends one hold of a lock. When none is left, hands the lock to the first live waiter in line
-- and announces the grant, or deletes the lock and announces the release.
-- KEYS[1] the lock (see lock.lua), KEYS[2] its fence counter, KEYS[3] the queue, KEYS[4] the waiters'
-- entries (see queue.lua)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] 'SPUBLISH' on Cluster, 'PUBLISH' elsewhere,
-- ARGV[4] fence counter retention in ms, ARGV[5] how to count the listeners of a release (see
-- handover), ARGV[6] the token of the hold's grant, or '0' for whatever lock the owner holds
-- (a clean-up of an acquisition whose answer was lost), ARGV[7] 'hash' to hand the lock over
-- as a hash (WithPlainLocks(false)), else ''
-- The announcements go to channels in the lock's hash slot (see handover in take.lua).
-- Returns the hold count left (0: the lock is no longer this owner's), -1 when the owner does
-- not hold the lock, or holds a later one: the hold of a lock lost and taken again by its
-- owner is not in the new one. A hold released already leaves the count unchanged, so a
-- retried release is harmless.
local h = read_lock(KEYS[1], 'owner', 'count', 'h:' .. ARGV[2], 'q', 'token')
if h[1] ~= ARGV[1] or (ARGV[6] ~= '0' and h[5] ~= ARGV[6]) then
  return -1
end
local n = tonumber(h[2])
if not h[3] then
  return n
end
if n > 1 then
  redis.call('HDEL', KEYS[1], 'h:' .. ARGV[2])
  return redis.call('HINCRBY', KEYS[1], 'count', -1)
end
redis.call('DEL', KEYS[1])
-- The line is looked at only when a waiter joined it while this lock was held (q).
if h[4] then
  local err = handover(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[3], ARGV[5], ARGV[7] == 'hash')
  if err then
    return redis.error_reply(err)
  end
else
  announce(KEYS[1], ARGV[3], ARGV[5])
end
return 0
