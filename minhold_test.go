package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// sessionStore hides the memory store's Expirer: the Client takes it for a store whose locks
// live as long as a session (etcd, ZooKeeper), and keeps a lock released early itself.
type sessionStore struct{ fencelock.Backend }

// WithMinHold: a lock of a 1 s TTL released 200 ms after its grant stays taken until the 5 s
// minimum, a contender meanwhile is refused, the waiter is served at the minimum and not
// before, and the released handle is over at once. On a store whose locks go by their TTL the
// Client's Close does not wait: the store keeps the lock; on a session store Close waits and
// releases it at the minimum.
func TestMinHoldKeepsTheNameUntilItsEnd(t *testing.T) {
	for _, session := range []bool{false, true} {
		name := map[bool]string{false: "ttl", true: "session"}[session]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memorybackend.New()
				var backend fencelock.Backend = store.Backend()
				if session {
					backend = sessionStore{backend}
				}
				a, b := fencelock.New(backend), fencelock.New(store.Backend())
				defer b.Close()
				ctx := t.Context()
				start := time.Now()
				lock, err := a.Obtain(ctx, "nightly", fencelock.WithTTL(time.Second), fencelock.WithMinHold(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
				if err := lock.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if time.Since(start) != 200*time.Millisecond || lock.Context().Err() == nil {
					t.Fatalf("the release returned %v after the grant, context %v: want at once, the handle ended", time.Since(start), lock.Context().Err())
				}
				var held *fencelock.HeldError
				if _, err := b.TryObtain(ctx, "nightly"); !errors.As(err, &held) {
					t.Fatalf("TryObtain within the minimum: %v, want a *HeldError", err)
				}
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
				want := 200 * time.Millisecond
				if session {
					want = 5 * time.Second
				}
				if at := time.Since(start); at != want {
					t.Fatalf("Close returned %v after the grant, want %v", at, want)
				}
				next, err := b.Obtain(ctx, "nightly", fencelock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer next.Release(context.Background())
				if at := time.Since(start); at != 5*time.Second {
					t.Fatalf("the next holder was served %v after the first one's grant, want at the 5 s minimum", at)
				}
			})
		})
	}
}

// A release after the minimum, or of a hold that is not the lock's last, is a plain release.
func TestMinHoldAfterItsEndOrWithHoldsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		ctx := t.Context()
		lock, err := a.Obtain(ctx, "job", fencelock.WithTTL(time.Second), fencelock.WithMinHold(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		again, err := a.Obtain(lock.Context(), "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if info, err := b.Inspect(ctx, "job"); err != nil || info.Count != 1 {
			t.Fatalf("after the release of one of two holds: %+v, %v; want one hold left", info, err)
		}
		time.Sleep(3 * time.Second)
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if info, err := b.Inspect(ctx, "job"); err != nil || info.Held {
			t.Fatalf("released after its minimum: %+v, %v; want the lock free", info, err)
		}
	})
}

// A negative minimum, or one above the cap, is bad input.
func TestMinHoldBadInput(t *testing.T) {
	c := fencelock.New(memorybackend.New().Backend())
	defer c.Close()
	for _, opts := range [][]fencelock.Option{
		{fencelock.WithMinHold(-time.Second)},
		{fencelock.WithMinHold(time.Minute), fencelock.WithMaxHold(time.Second)},
	} {
		if l, err := c.TryObtain(context.Background(), "x", opts...); !errors.Is(err, fencelock.ErrInvalid) {
			if l != nil {
				_ = l.Release(context.Background())
			}
			t.Fatalf("a bad minimum: %v, want ErrInvalid", err)
		}
	}
}
