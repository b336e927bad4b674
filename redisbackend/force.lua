-- Deletes a lock whoever holds it, if the holder is still the one the operator saw.
-- KEYS[1] the lock hash
-- ARGV[1] the owner ID the caller saw, ARGV[2] 'SPUBLISH' on Cluster, 'PUBLISH' elsewhere
-- Returns 1 when it deleted the lock, 0 when the lock changed owner or was gone.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], KEYS[1] .. ':released', '')
return 1
