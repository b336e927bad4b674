package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// A majority that keeps the lock for one owner under tokens that differ — here three of five
// nodes say 0, as when the token writes of an acquisition were lost to a fault after it was
// granted — names no term: Inspect reads again for a while and then says it cannot tell,
// rather than report a token no majority stored. An operator can still remove the lock.
func TestInspectOfALockWhoseTokenIsNotSettled(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clients := dial(t, addrs)
	b := newBackend(t, clients)
	req := driver.Request{Name: t.Name(), Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	b.Settle()
	key := b.Key(req.Name)
	for _, c := range clients[:3] {
		if err := c.(*redis.Client).HSet(ctx, key, "token", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	info, err := b.Inspect(ctx, req.Name)
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Inspect of a lock whose nodes agree on no token: %+v, %v; want ErrUnavailable", info, err)
	}
	removed, err := b.ForceRelease(ctx, req.Name)
	if err != nil || !removed.Held || removed.Owner != req.Owner {
		t.Fatalf("ForceRelease of a lock whose nodes agree on no token: %+v, %v", removed, err)
	}
	b.Settle()
	if info, err := b.Inspect(ctx, req.Name); err != nil || info.Held {
		t.Fatalf("Inspect after ForceRelease: %+v, %v", info, err)
	}
}
