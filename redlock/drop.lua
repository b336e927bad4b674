-- Deletes a lock on one node if the given owner holds it there: the last release when this
-- node's count disagrees with the majority's, and ForceRelease.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] how to announce the release (see announce.lua of
-- internal/redislayer)
-- Returns 1 when it deleted the lock, 0 when another owner or nobody held it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
announce(KEYS[1], ARGV[2])
return 1
