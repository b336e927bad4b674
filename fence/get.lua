-- get.lua: read a value stored by set.lua.
--
-- KEYS[1]  the hash; fields "value" and "token".
-- ARGV     none.
-- Returns  {value, token} (both strings) if the hash exists;
--          nil (a Lua false) if KEYS[1] does not exist.
-- Errors   "WRONGTYPE ..."    if KEYS[1] holds a type other than a hash;
--          "FENCEINVALID ..." if the hash lacks the value or token field.

local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  return false
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE key holds a ' .. t .. ', not a fenced hash')
end

local v = redis.call('HMGET', KEYS[1], 'value', 'token')
if not v[1] or not v[2] then
  return redis.error_reply('FENCEINVALID hash has no value or token field')
end
return v
