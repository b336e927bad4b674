package redisbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// The expiries of a semaphore evicted while its permits' records stay (a data loss, as an
// eviction makes): the holders that come back are counted once each, and the limit still
// holds. Before, each comeback subtracted its permits from a count already reset, and a third
// holder got into a semaphore of two.
func TestSemaphoreExpiriesLostCountsComebacksOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	req := func(owner, hold string) fencelock.Request {
		return fencelock.Request{Name: "sem-evicted", Owner: owner, Hold: hold, TTL: 10 * time.Second, Limit: 2}
	}
	for _, o := range []string{"a", "b"} {
		if _, err := b.Acquire(ctx, req(o, "1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Del(ctx, b.Key("sem-evicted")+":s:x").Err(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"a", "b"} {
		if _, err := b.Acquire(ctx, req(o, "2")); err != nil {
			t.Fatalf("owner %s coming back: %v", o, err)
		}
	}
	var held *fencelock.HeldError
	if _, err := b.Acquire(ctx, req("c", "1")); !errors.As(err, &held) {
		t.Fatalf("a third holder of a semaphore of 2: %v, want a *HeldError", err)
	}
	info, err := b.InspectSemaphore(ctx, "sem-evicted")
	if err != nil || len(info.Permits) != 2 || info.InUse != 2 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
}
