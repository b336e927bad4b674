package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floor: the SET NX PX and compare-and-delete pair every Redis lock is built on, on one
// go-redis client, with a token that costs next to nothing to make. Every ratio in the report
// is against it.
func init() {
	register(&Entry{
		Library: "floor", Setting: "SET NX PX + compare-and-delete, poll 1ms",
		Floor: true, Waits: true, Uncontended: true,
		Note: "floor: SET NX PX 30s and a compare-and-delete script on one go-redis client (defaults); waits by polling every 1ms; token: a per-client random prefix and a counter",
		New: func(addrs []string) (Contender, error) {
			return newFloor(newGoRedis(addrs[0])), nil
		},
	})
}

var floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type floor struct {
	rdb    *redis.Client
	prefix string
	seq    atomic.Uint64
}

type floorHeld struct {
	f           *floor
	name, token string
}

func newFloor(rdb *redis.Client) *floor {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &floor{rdb: rdb, prefix: hex.EncodeToString(b[:]) + "."}
}

func (f *floor) TryObtain(ctx context.Context, name string) (Held, error) {
	token := f.prefix + strconv.FormatUint(f.seq.Add(1), 10)
	ok, err := f.rdb.SetNX(ctx, name, token, 30*time.Second).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errHeld
	}
	return &floorHeld{f, name, token}, nil
}

func (h *floorHeld) Release(ctx context.Context) error {
	return floorRelease.Run(ctx, h.f.rdb, []string{h.name}, h.token).Err()
}

func (f *floor) Obtain(ctx context.Context, name string) (Held, error) {
	return pollObtain(ctx, name, f.TryObtain)
}

func (f *floor) Close() error { return f.rdb.Close() }

// newGoRedis is the go-redis client every go-redis based contender gets: the library's
// defaults, on one server.
func newGoRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}
