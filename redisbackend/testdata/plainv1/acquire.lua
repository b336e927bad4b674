-- Takes the lock for an owner, or re-enters it when the owner holds it already.
-- KEYS[1] the lock, in either form (see lock.lua)
-- KEYS[2] the fence counter of the lock (same hash tag), KEYS[3] the line (see queue.lua)
-- ARGV[1] owner ID, ARGV[2] hold ID, ARGV[3] TTL in ms, ARGV[4] fence counter retention in ms,
-- ARGV[5] what the holder publishes about itself ('' for nothing), kept in the field meta,
-- ARGV[6] 'hash' to write the lock as a hash whatever it holds (WithPlainLocks(false)), else ''
-- Returns {1, token, count} when the owner holds the lock after the call,
--         {0, pttl} when another owner holds it.
-- Neither the lock nor a line, the usual case: one call tells.
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], false, ARGV[6] == 'hash')
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  -- Free with waiters in line (its holder let it expire): theirs is the next release.
  return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], true)
end
local h, plain = read_lock(KEYS[1], 'owner')
local owner = h[1]
if owner == ARGV[1] then
  if plain then
    to_hash(KEYS[1], plain)
  end
  return reenter(KEYS[1], ARGV[2], ARGV[3], pttl)
end
if owner and pttl >= 0 then
  return {0, pttl}
end
return redis.error_reply('FENCELOCK the lock key holds a ' .. (plain and 'string' or 'hash') .. ' that fencelock did not write')
