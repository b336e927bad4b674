package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
)

// A holder whose lock expired and was taken by another must not release the other's lock.
func TestReleaseAfterExpiryLeavesNewHolder(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	a, b := newLocker(t, rdb), newLocker(t, rdb)
	name := lockName(t)

	stale, err := a.Obtain(ctx, name, fencelock.WithTTL(50*time.Millisecond), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := b.Obtain(ctx, name, fencelock.WithTTL(10*time.Second)) // waits out the 50ms
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("stale release: got %v, want ErrNotHeld", err)
	}
	info, err := b.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Owner != fresh.Owner() || info.Token != fresh.Token() {
		t.Fatalf("the new holder's lock was touched: %+v", info)
	}
	if err := fresh.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseNilOrTwice(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	var nilLock *fencelock.Lock
	if err := nilLock.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("nil lock: %v", err)
	}
	if err := nilLock.Refresh(ctx, 0); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("nil lock refresh: %v", err)
	}
	if nilLock.Context().Err() == nil || nilLock.Token() != 0 || nilLock.Name() != "" {
		t.Fatal("a nil lock must look released")
	}

	c := newLocker(t, singleClient(t))
	lock, err := c.Obtain(ctx, lockName(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
	if err := lock.Context().Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("context after release: %v", err)
	}
	if err := lock.Refresh(ctx, 0); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("refresh after release: %v", err)
	}
}

// A release retried with the same hold ID must not decrement the count twice: the first
// attempt's outcome may be unknown to the client while it did reach the store.
func TestRetriedReleaseDoesNotDecrementTwice(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	name := lockName(t)
	req := driver.Request{Name: name, Owner: "owner-1", TTL: 10 * time.Second}
	for _, hold := range []string{"h1", "h2", "h2"} { // h2 twice: a retried acquire
		req.Hold = hold
		if _, err := b.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rdb.HGet(ctx, b.Key(name), "count").Int(); n != 2 {
		t.Fatalf("count %d after two holds, one acquired twice; want 2", n)
	}
	lease := driver.Lease{Name: name, Owner: "owner-1", TTL: 10 * time.Second}
	for i := 0; i < 3; i++ {
		n, err := b.Release(ctx, lease, "h2")
		if err != nil || n != 1 {
			t.Fatalf("release %d of h2: count %d, %v; want 1", i, n, err)
		}
	}
	n, err := b.Release(ctx, lease, "h1")
	if err != nil || n != 0 {
		t.Fatalf("release h1: %d, %v", n, err)
	}
	if rdb.Exists(ctx, b.Key(name)).Val() != 0 {
		t.Fatal("the lock key survived its last release")
	}
}
