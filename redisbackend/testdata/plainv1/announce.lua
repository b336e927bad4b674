-- announce(lock, publish, count) tells whoever listens on <lock>:released that the lock is
-- free, with publish ('PUBLISH', or 'SPUBLISH' under sharded pub/sub), if the server counts
-- any listener there (count: the PUBSUB subcommand that counts them, 'NUMSUB' or
-- 'SHARDNUMSUB'; '' announces always, where the server cannot count every node's listeners).
-- A release nobody waits for then costs no message. This fragment opens the scripts that
-- free locks (see Announce).
local function announce(lock, publish, count)
  local channel = lock .. ':released'
  if count == '' or redis.call('PUBSUB', count, channel)[2] > 0 then
    redis.call(publish, channel, '')
  end
end
