-- The two forms of a lock. A lock is a hash {owner, token, count, h:<hold id> per hold, meta; q
-- when waiters may be in line} or, for one holder with one hold, no metadata and no line, a
-- plain key '<token> <hold id> <owner>' (a hold ID without white space); either always has a
-- TTL. Every script that reads a lock reads both, so that clients that write plain keys and
-- clients that write only hashes can share a name (a rolling upgrade); a client older than
-- both forms fails on a plain key with WRONGTYPE, and never takes it.

-- read_lock(lock, field...) reads the fields of a lock as HMGET does, false for what it lacks,
-- in either form; for a plain key it returns its parts {owner, token, hold} too, nil for a
-- hash. A plain key has count 1 and the one hold h:<hold id>. A key of neither form raises
-- the server's WRONGTYPE error, as HMGET would.
local function read_lock(lock, ...)
  local fields = {...}
  -- GET first: most locks are plain keys (take.lua).
  local v = redis.pcall('GET', lock)
  if type(v) == 'table' and v.err then
    return redis.call('HMGET', lock, unpack(fields)), nil
  end
  if not v then
    local out = {}
    for i = 1, #fields do
      out[i] = false
    end
    return out, nil
  end
  local token, hold, owner = string.match(v, '^(%d+) (%S*) (.*)$')
  if not token then
    error(redis.error_reply('FENCELOCK the lock key holds a string that fencelock did not write'))
  end
  local plain = {owner = owner, token = token, hold = hold}
  local known = {owner = owner, token = token, count = '1', ['h:' .. hold] = '1'}
  local out = {}
  for i, f in ipairs(fields) do
    out[i] = known[f] or false
  end
  return out, plain
end

-- to_hash(lock, plain) writes a plain key, read by read_lock, as the hash of the same lock,
-- keeping its TTL: re-entry, metadata and a line need the hash.
local function to_hash(lock, plain)
  local pttl = redis.call('PTTL', lock)
  redis.call('DEL', lock)
  redis.call('HSET', lock, 'owner', plain.owner, 'token', plain.token, 'count', 1, 'h:' .. plain.hold, 1)
  if pttl > 0 then
    redis.call('PEXPIRE', lock, pttl)
  end
end

