-- Deletes a lock on one node if the given owner holds it there: ForceRelease, and the last
-- release when this node's count disagrees with the majority's, which asks ARGV[3] '1': then
-- only a count that no hold ID stands for is deleted (a node that took the key back after a
-- restart keeps no hold IDs); a lock with a hold ID left keeps a hold someone may still
-- release — another process's of the same owner, whose acquisition landed here after the
-- other nodes answered the release.
-- KEYS[1] the lock hash
-- ARGV[1] owner ID, ARGV[2] how to announce the release (see announce.lua of
-- internal/redislayer), ARGV[3] '1' to keep a lock that has a hold ID, '0' to delete it anyway
-- Returns 1 when it deleted the lock, 0 when another owner or nobody held it, or it kept it.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
if ARGV[3] == '1' then
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 2) == 'h:' then
      return 0
    end
  end
end
redis.call('DEL', KEYS[1])
announce(KEYS[1], ARGV[2])
return 1
