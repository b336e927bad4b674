-- Takes the lock for an owner, or re-enters it when the owner holds it already.
-- KEYS[1] the lock, in either form (see lock.lua)
-- KEYS[2] the fence counter of the lock (same hash tag), KEYS[3] the line (see queue.lua)
-- ARGV[1] owner ID, ARGV[2] TTL in ms; then, each only when it or one after it is not empty
-- (an argument costs the server a string): ARGV[3] hold ID, ARGV[4] what the holder publishes
-- about itself, kept in the field meta
-- The Backend's settings open the script (cycleScripts in scripts.go): RETENTION, the fence
-- counter retention in ms, and HASH, true to write the lock as a hash whatever it holds
-- (WithPlainLocks(false)).
-- Returns the token when the owner holds the lock, with one hold, after the call,
--         {1, token, count} when it re-entered a lock it held already,
--         {0, pttl} when another owner holds it.
-- This opens the script, after take.lua: the usual case returns here, before the functions of
-- the others are defined (see scripts.go).
local owner, ttl, retention = ARGV[1], ARGV[2], RETENTION
local hold, meta, hash = ARGV[3] or '', ARGV[4] or '', HASH
-- Neither the lock nor a line, the usual case: one call tells.
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local token, err = take(KEYS[1], KEYS[2], owner, hold, ttl, retention, meta, false, hash)
  return token or redis.error_reply(err)
end
