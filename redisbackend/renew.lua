-- Extends a lock if the owner still holds it under the token of the renewal's grant.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] TTL in ms, ARGV[3] the token of the grant being renewed, or '0' for
-- whatever lock the owner holds, ARGV[4] '1' to set the TTL even when shorter than what the
-- lock has left (Lock.Refresh), '0' to extend only (the watchdog: holds of one owner in other
-- processes may have asked for longer)
-- Returns 1 when extended, 0 when the owner does not hold the lock, or holds a later one: a
-- renewal sent for an earlier lock of the owner must not change a later lock's TTL.
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if h[1] == ARGV[1] and (ARGV[3] == '0' or h[2] == ARGV[3]) then
  if ARGV[4] == '1' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
