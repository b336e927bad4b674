-- Ends a lock whoever holds it, if the holder is still the one the operator saw, and hands it
-- to the first live waiter in line.
-- KEYS as release.lua; ARGV[1] the owner ID the caller saw, ARGV[2] how to announce the
-- release (see handover), ARGV[3] fence counter retention in ms, ARGV[4] 'hash' to hand the
-- lock over as a hash (WithPlainLocks(false)), else ''
-- Returns 1 when it ended the lock, 0 when the lock changed owner or was gone.
if read_lock(KEYS[1], 'owner')[1] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local err = handover(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[2], ARGV[4] == 'hash')
if err then
  return redis.error_reply(err)
end
return 1
