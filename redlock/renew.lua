-- Extends a lock on one node if the owner still holds it there.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] TTL in ms, ARGV[3] the holds the caller has of the lock when it
-- sets the TTL (Lock.Refresh), or '0' to extend only (the watchdog). A TTL shorter than what the
-- key has left is set only for a Refresh by a caller that has every hold of the lock: holds of
-- the same owner in another process may have asked for longer, and must not be cut short.
-- Returns {1, token, count, meta or false} when extended,
--         {0} when another owner holds the lock here,
--         {-1} when the key is gone (expired, deleted, or lost in a restart); nothing is
--         written: only a renewal that a majority confirmed may take the key back (retake.lua).
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'count', 'meta')
if h[1] == ARGV[1] then
  local holds = tonumber(ARGV[3])
  if (holds > 0 and tonumber(h[3] or '1') <= holds) or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, tonumber(h[2] or '0'), tonumber(h[3] or '1'), h[4]}
end
if h[1] then
  return {0}
end
return {-1}
