package main

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The fencing floor: the least a lock must do to hand out a fencing token of the kind
// fencelock's Redis backend gives, one that the server makes and that keeps increasing after
// its counter expires (the greater of the server clock in µs and the counter + 1). It is one
// script (TIME, the counter written with SET ... GET, the lock written with SET PX) and a
// compare-and-delete release, on one go-redis client: no hold count, reentrancy, waiting line
// or watchdog. It is a recipe, not a library, so it is never a best peer; it shows how much of
// the distance to the floor any such token costs by itself.
func init() {
	register(&Entry{
		Library: "fencing floor", Setting: "one script for lock and token",
		Reference: true, Uncontended: true,
		Note: "fencing floor: the least work for a fencing token made by the server that keeps increasing, as fencelock's does: one script reads the clock (TIME), writes the counter with SET ... GET, and sets the lock with SET PX 30s; release is a compare-and-delete script. No hold count, reentrancy, waiting or watchdog; a recipe for scale, not a peer",
		New: func(addrs []string) (Contender, error) {
			return &fencingFloor{newFloor(newGoRedis(addrs[0]))}, nil
		},
	})
}

var (
	fencingFloorAcquire = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = string.format('%.0f', now)
local last = tonumber(redis.call('SET', KEYS[2], s, 'PX', 86400000, 'GET') or '0')
if last >= now then
  now = last + 1
  s = string.format('%.0f', now)
  redis.call('SET', KEYS[2], s, 'PX', 86400000)
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. s, 'PX', 30000)
return now`)
	fencingFloorRelease = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

type fencingFloor struct{ f *floor }

type fencingFloorHeld struct {
	f     *floor
	keys  []string
	owner string
	token int64
}

func (c *fencingFloor) TryObtain(ctx context.Context, name string) (Held, error) {
	owner := c.f.prefix + strconv.FormatUint(c.f.seq.Add(1), 10)
	lock := "{" + name + "}"
	keys := []string{lock, lock + ":fence"}
	token, err := fencingFloorAcquire.Run(ctx, c.f.rdb, keys, owner).Int64()
	if err != nil {
		return nil, err
	}
	if token == 0 {
		return nil, errHeld
	}
	return &fencingFloorHeld{f: c.f, keys: keys[:1], owner: owner, token: token}, nil
}

func (h *fencingFloorHeld) Release(ctx context.Context) error {
	return fencingFloorRelease.Run(ctx, h.f.rdb, h.keys, h.owner).Err()
}

func (c *fencingFloor) Obtain(ctx context.Context, name string) (Held, error) {
	return pollObtain(ctx, name, c.TryObtain)
}

func (c *fencingFloor) Close() error { return c.f.Close() }
