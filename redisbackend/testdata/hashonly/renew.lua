-- Extends a lock if the owner still holds it under the token of the renewal's grant.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] TTL in ms, ARGV[3] the token of the grant being renewed, or '0' for
-- whatever lock the owner holds, ARGV[4] the holds the caller has of the lock when it sets the
-- TTL (Lock.Refresh), or '0' to extend only (the watchdog)
-- A TTL shorter than what the lock has left is set only for a Refresh by a caller that has
-- every hold of the lock: holds of the same owner in another process may have asked for
-- longer, and must not be cut short.
-- Returns 1 when extended, 0 when the owner does not hold the lock, or holds a later one: a
-- renewal sent for an earlier lock of the owner must not change a later lock's TTL.
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'count')
if h[1] == ARGV[1] and (ARGV[3] == '0' or h[2] == ARGV[3]) then
  local holds = tonumber(ARGV[4])
  if (holds > 0 and tonumber(h[3] or '1') <= holds) or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
