package fencelock_test

import (
	"context"
	"errors"
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
