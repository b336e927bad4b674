-- The rest of acquire.lua: the lock, or a line, exists.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  -- Free with waiters in line (its holder let it expire): theirs is the next release.
  local token, err = take(KEYS[1], KEYS[2], owner, hold, ttl, retention, meta, true, hash)
  return token or redis.error_reply(err)
end
local h, plain = read_lock(KEYS[1], 'owner')
if h[1] == owner then
  if plain then
    to_hash(KEYS[1], plain)
  end
  return reenter(KEYS[1], hold, ttl, pttl)
end
if h[1] and pttl >= 0 then
  return {0, pttl}
end
return redis.error_reply('FENCELOCK the lock key holds a ' .. (plain and 'string' or 'hash') .. ' that fencelock did not write')
