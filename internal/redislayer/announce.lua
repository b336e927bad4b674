-- announce(lock, how) tells whoever listens on <lock>:released that the lock is free, as how
-- says (see Announce): 'NUMSUB' with PUBLISH and 'SHARDNUMSUB' with SPUBLISH (sharded pub/sub),
-- each only if the server counts a listener there, and 'PUBLISH' with PUBLISH always, where
-- the server cannot count every node's listeners. A release nobody waits for then costs no
-- message. This fragment opens the scripts that free locks (see Announce).
local function announce(lock, how)
  local channel = lock .. ':released'
  if how == 'PUBLISH' or redis.call('PUBSUB', how, channel)[2] > 0 then
    redis.call(how == 'SHARDNUMSUB' and 'SPUBLISH' or 'PUBLISH', channel, '')
  end
end
