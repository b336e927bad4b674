-- set.lua: store a value in a hash if the writer's fencing token is not
-- older than the token already stored there.
--
-- KEYS[1]  the hash; fields "value" and "token".
-- ARGV[1]  the value to store.
-- ARGV[2]  the writer's token as a canonical decimal string (> 0, no sign,
--          no leading zeros), as produced by Go's strconv.FormatInt.
-- Returns  {1, ARGV[2]} when the value and token were stored;
--          {0, latest}  when refused, latest being the stored token string.
-- Errors   "WRONGTYPE ..."    if KEYS[1] holds a type other than a hash;
--          "FENCEINVALID ..." if ARGV[2] or the stored token is malformed.
--
-- Tokens are compared as decimal strings, never as Lua numbers: Lua
-- numbers are doubles (exact only up to 2^53) and tostring() prints large
-- ones in exponent form. For canonical positive decimals the longer string
-- is the greater number, and equal lengths compare byte by byte (done here
-- with string.byte, since the < operator on strings follows the locale).
-- The token is stored exactly as received.

local function canonical(s)
  return type(s) == 'string' and string.find(s, '^[1-9]%d*$') ~= nil
end

-- older(a, b): is a < b, for canonical decimal strings?
local function older(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end

local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('WRONGTYPE key holds a ' .. t .. ', not a fenced hash')
end

local token = ARGV[2]
if not canonical(token) then
  return redis.error_reply('FENCEINVALID token argument is not a positive decimal integer')
end

local latest = redis.call('HGET', KEYS[1], 'token')
if latest then
  if not canonical(latest) then
    return redis.error_reply('FENCEINVALID stored token is not a positive decimal integer')
  end
  if older(token, latest) then
    return {0, latest}
  end
end

redis.call('HSET', KEYS[1], 'value', ARGV[1], 'token', token)
return {1, token}
