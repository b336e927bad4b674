-- Reports a semaphore without changing it.
-- KEYS[1] the permits, KEYS[2] the expiries, KEYS[3] the fence counter, KEYS[4] the line,
-- KEYS[5] the places (see sem.lua)
-- Returns {limit, last token, waiters, owner1, record1, ms left1, owner2, ...}, the permits in
-- the order they expire.
local now = sem_now()
local out = {tonumber(redis.call('HGET', KEYS[1], 'limit') or '0'), redis.call('GET', KEYS[3]) or '0', 0}
local line = redis.call('ZRANGE', KEYS[4], 0, -1)
for _, m in ipairs(line) do
  if tonumber(string.match(redis.call('HGET', KEYS[5], m) or '', '^(%d+)') or '0') > now then
    out[3] = out[3] + 1
  end
end
local held = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #held, 2 do
  local rec = redis.call('HGET', KEYS[1], 'o:' .. held[i])
  if rec then
    table.insert(out, held[i])
    table.insert(out, rec)
    table.insert(out, math.max(tonumber(held[i + 1]) - now - 1, 0))
  end
end
if #out == 3 then
  out[1] = 0
end
return out
