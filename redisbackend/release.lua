-- Ends one hold of a lock. When none is left, hands the lock to the first live waiter in line
-- and announces the grant, or deletes the lock and announces the release.
-- KEYS[1] the lock (see lock.lua), KEYS[2] its fence counter, KEYS[3] the queue, KEYS[4] the waiters'
-- entries (see queue.lua)
-- ARGV[1] the hold: '<token> <hold id> <owner>', which is the lock's plain form while the hold
-- is its only one, with token 0 for whatever lock the owner holds (a clean-up of an
-- acquisition whose answer was lost); ARGV[2] the hold ID, only when it has white space (else
-- it is read from ARGV[1])
-- The Backend's settings open the script (cycleScripts in scripts.go): HOW, how to announce a
-- release (see announce.lua of internal/redislayer), RETENTION, the fence counter retention in
-- ms, and HASH, true to hand the lock over as a hash (WithPlainLocks(false)).
-- The announcements go to channels in the lock's hash slot (see handover.lua).
-- Returns the hold count left (0: the lock is no longer this owner's), -1 when the owner does
-- not hold the lock, or holds a later one: the hold of a lock lost and taken again by its
-- owner is not in the new one. A hold released already leaves the count unchanged, so a
-- retried release is harmless.
-- This opens the script, after announce.lua: the usual case, a plain key that is this very
-- hold, returns here, before the functions of the others are defined (see scripts.go).
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  announce(KEYS[1], HOW)
  return 0
end
