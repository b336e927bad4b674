-- Replaces what the holder of a lock published about itself (Leadership.Proclaim), and
-- announces the change to whoever watches the lock's holder.
-- KEYS[1] the lock (see lock.lua)
-- ARGV[1] owner ID, ARGV[2] the token of the owner's lock, ARGV[3] the metadata ('' for
-- none), ARGV[4] how to announce the change (see announce.lua of internal/redislayer)
-- Returns 1, or -1 when the owner does not hold the lock under that token.
local h, plain = read_lock(KEYS[1], 'owner', 'token')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then
  return -1
end
if ARGV[3] == '' then
  if not plain then
    redis.call('HDEL', KEYS[1], 'meta')
  end
else
  if plain then
    to_hash(KEYS[1], plain)
  end
  redis.call('HSET', KEYS[1], 'meta', ARGV[3])
end
announce(KEYS[1], ARGV[4])
return 1
