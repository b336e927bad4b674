package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// Obtaining a lock again with its own context re-enters it: the hold count lives in Redis and
// the key goes away only when the last hold is released.
func TestReentrantThroughContext(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxTimeout(t, 10*time.Second)
		b := redisbackend.New(rdb)
		c := fencelock.New(b)
		defer c.Close()
		name := lockName(t)
		outer, err := c.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.TryObtain(outer.Context(), name)
		if err != nil {
			t.Fatalf("reentrant TryObtain: %v", err)
		}
		if inner.HoldCount() != 2 || inner.Token() != outer.Token() || inner.Owner() != outer.Owner() {
			t.Fatalf("inner hold: count %d token %d/%d", inner.HoldCount(), inner.Token(), outer.Token())
		}
		if n, _ := rdb.HGet(ctx, b.Key(name), "count").Int(); n != 2 {
			t.Fatalf("hold count in Redis %d, want 2", n)
		}
		// Another owner is still locked out.
		if _, err := c.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("a different owner got in: %v", err)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := rdb.HGet(ctx, b.Key(name), "count").Int(); n != 1 {
			t.Fatalf("hold count after inner release %d, want 1", n)
		}
		if err := outer.Context().Err(); err != nil {
			t.Fatalf("outer lock's context ended with the inner release: %v", err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if rdb.Exists(ctx, b.Key(name)).Val() != 0 {
			t.Fatal("lock key left after the last release")
		}
	})
}

// An explicit owner re-enters across goroutines and clients.
func TestReentrantWithOwner(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	c1, c2 := newLocker(t, rdb), newLocker(t, rdb)
	name := lockName(t)
	l1, err := c1.Obtain(ctx, name, fencelock.WithOwner("job-42"))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c2.TryObtain(ctx, name, fencelock.WithOwner("job-42"))
	if err != nil {
		t.Fatalf("same owner on another client: %v", err)
	}
	if l2.HoldCount() != 2 || l2.Token() != l1.Token() {
		t.Fatalf("count %d, tokens %d %d", l2.HoldCount(), l1.Token(), l2.Token())
	}
	if _, err := c2.TryObtain(ctx, name, fencelock.WithOwner("job-43")); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("other owner: %v", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Context().Err(); err != nil {
		t.Fatalf("second hold lost with the first release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c1.Inspect(ctx, name); info.Held {
		t.Fatalf("still held: %+v", info)
	}
}

// A context of a lock on another name does not make an acquisition reentrant.
func TestReentrancyIsPerName(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newLocker(t, singleClient(t))
	a, err := c.Obtain(ctx, lockName(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.Obtain(a.Context(), lockName(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if b.HoldCount() != 1 || b.Owner() == a.Owner() {
		t.Fatalf("lock b re-entered a: count %d", b.HoldCount())
	}
	// The nested lock context carries the caller's values.
	type key struct{}
	vctx := context.WithValue(ctx, key{}, "v")
	l, err := c.Obtain(vctx, lockName(t, "c"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Context().Value(key{}) != "v" {
		t.Fatal("lock context lost the caller's values")
	}
}

// Two goroutines obtaining the lock with the same owner at once are two holds of one lock: the
// replies may come back in either order, and neither may end the other as lost.
func TestSameOwnerConcurrentObtains(t *testing.T) {
	for _, tc := range []struct {
		name   string
		obtain func(c *fencelock.Client, ctx context.Context, name string, opts ...fencelock.Option) (*fencelock.Lock, error)
	}{
		{"TryObtain", (*fencelock.Client).TryObtain},
		{"Obtain", (*fencelock.Client).Obtain}, // the queued path
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 60*time.Second)
			rdb := singleClient(t)
			b := redisbackend.New(rdb, redisbackend.WithPipelining(0))
			c := fencelock.New(b)
			defer c.Close()
			lost := 0
			for round := range 150 {
				name := lockName(t, fmt.Sprint(round))
				var locks [2]*fencelock.Lock
				var errs [2]error
				var wg sync.WaitGroup
				for i := range locks {
					wg.Go(func() {
						locks[i], errs[i] = tc.obtain(c, ctx, name, fencelock.WithOwner("shared-owner"))
					})
				}
				wg.Wait()
				for i := range locks {
					if errs[i] != nil {
						t.Fatalf("round %d: %v", round, errs[i])
					}
				}
				for _, l := range locks {
					if err := l.Valid(); err != nil {
						lost++
						t.Logf("round %d: %v (hold count in Redis: %s)", round, err, rdb.HGet(ctx, b.Key(name), "count").Val())
					}
				}
				for _, l := range locks {
					_ = l.Release(ctx)
				}
			}
			if lost > 0 {
				t.Fatalf("%d of 300 validly held locks reported lost", lost)
			}
		})
	}
}

// Two processes holding one lock under one owner (WithOwner) with TTLs of their own: the
// shorter one's watchdog must not cut the lock below what the longer one was granted and
// trusts.
func TestSharedOwnerShorterTTLDoesNotCutTheLock(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	name := lockName(t)
	first, second := holdsOfOneOwner(t, ctx, rdb, name, 300*time.Millisecond)
	defer first.Release(ctx)
	defer second.Release(ctx)
	time.Sleep(time.Second) // the short hold's watchdog renews every 100ms
	pttl := rdb.PTTL(ctx, b.Key(name)).Val()
	if left := time.Until(first.ValidUntil()); pttl < left {
		t.Fatalf("Redis keeps the lock for %v while its longer-TTL holder trusts it for %v", pttl, left)
	}
}

// holdsOfOneOwner obtains name under one owner through two Clients, as two processes would:
// the first with a 10 s TTL, the second with ttl.
func holdsOfOneOwner(t *testing.T, ctx context.Context, rdb *redis.Client, name string, ttl time.Duration) (first, second *fencelock.Lock) {
	t.Helper()
	first, err := newLocker(t, rdb).Obtain(ctx, name, fencelock.WithOwner("shared"), fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	second, err = newLocker(t, rdb).Obtain(ctx, name, fencelock.WithOwner("shared"), fencelock.WithTTL(ttl))
	if err != nil {
		_ = first.Release(ctx)
		t.Fatal(err)
	}
	return first, second
}

// The same with Refresh: one process refreshing its hold of a shared owner's lock to a shorter
// TTL must not cut the lock below what the other process was granted and trusts. A caller
// that has every hold of the lock still shortens it (TestRefreshShorterMovesDeadline).
func TestSharedOwnerRefreshShorterDoesNotCutTheLock(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	name := lockName(t)
	first, second := holdsOfOneOwner(t, ctx, rdb, name, 10*time.Second)
	defer first.Release(ctx)
	if err := second.Refresh(ctx, 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	pttl := rdb.PTTL(ctx, b.Key(name)).Val()
	if left := time.Until(first.ValidUntil()); pttl < left {
		t.Fatalf("Redis keeps the lock for %v while its other holder trusts it for %v", pttl, left)
	}
}
