package fencelock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// Every token is strictly greater than every token issued before for the name: after a
// release, after the lock key expired, after the fence counter expired (emulating a server
// clock jump past the retention with PEXPIRE), and after FLUSHALL.
func TestFenceTokensStrictlyIncrease(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxTimeout(t, 20*time.Second)
		b := redisbackend.New(rdb)
		c := fencelock.New(b)
		defer c.Close()
		name := lockName(t)
		var last int64
		next := func(step string) {
			t.Helper()
			lock, err := c.Obtain(ctx, name, fencelock.WithTTL(50*time.Millisecond), fencelock.WithWatchdog(false))
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if lock.Token() <= last {
				t.Fatalf("%s: token %d not greater than %d", step, lock.Token(), last)
			}
			last = lock.Token()
		}
		for i := 0; i < 20; i++ {
			next("after expiry") // each lock expires: the next Obtain waits its TTL out
		}
		if err := rdb.PExpire(ctx, b.Key(name)+":fence", time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		next("after the fence counter expired")
		// A counter far ahead of the clock (many acquisitions in one microsecond) is kept.
		if err := rdb.Set(ctx, b.Key(name)+":fence", last+1_000_000_000, 0).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		next("with the counter ahead of the clock")
		if last < 1_000_000_000 {
			t.Fatal("counter ignored")
		}
		if pttl := rdb.PTTL(ctx, b.Key(name)+":fence").Val(); pttl <= 0 {
			t.Fatalf("the fence counter has no TTL (%v): it would leak", pttl)
		}
	})
}

// The fence counter lives the configured retention, so fencing leaves a bounded set of keys.
func TestFenceRetentionBoundsKeys(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb, redisbackend.WithFenceRetention(time.Minute))
	c := fencelock.New(b)
	defer c.Close()
	name := lockName(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pttl := rdb.PTTL(ctx, b.Key(name)+":fence").Val()
	if pttl <= 0 || pttl > time.Minute {
		t.Fatalf("fence counter PTTL %v, want (0, 1m]", pttl)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil || info.Held || info.Token != lock.Token() {
		t.Fatalf("inspect after release: %+v %v", info, err)
	}
}
