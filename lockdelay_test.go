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

// WithLockDelay: a lock its holder stopped renewing is trusted for its TTL and kept from
// others for the delay after that — whether the holder let it run out (no watchdog) or was cut
// off from the store while renewing — and a Release frees it at once.
func TestLockDelayKeepsALostLockFromOthers(t *testing.T) {
	for _, how := range []string{"no-watchdog", "cut-off", "release"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memorybackend.New()
				backend := store.Backend()
				a, b := fencelock.New(backend), fencelock.New(store.Backend())
				defer a.Close()
				defer b.Close()
				ctx := t.Context()
				start := time.Now()
				lock, err := a.Obtain(ctx, "job", fencelock.WithTTL(time.Second), fencelock.WithLockDelay(2*time.Second), fencelock.WithWatchdog(how != "no-watchdog"))
				if err != nil {
					t.Fatal(err)
				}
				if until := lock.ValidUntil(); until.After(start.Add(time.Second)) {
					t.Fatalf("trusted until %v after the grant, past its 1 s TTL", until.Sub(start))
				}
				var lost time.Time
				switch how {
				case "release":
					if err := lock.Release(ctx); err != nil {
						t.Fatal(err)
					}
					lost = time.Now()
				case "cut-off":
					time.Sleep(1500 * time.Millisecond) // renewed meanwhile
					backend.Partition(time.Minute)
					<-lock.Context().Done()
					lost = time.Now()
				default:
					<-lock.Context().Done()
					lost = time.Now()
				}
				next, err := b.Obtain(ctx, "job", fencelock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer next.Release(context.Background())
				gap := time.Since(lost)
				if how == "release" && gap != 0 {
					t.Fatalf("the next holder was served %v after a release, want at once", gap)
				}
				if how != "release" && gap < 2*time.Second {
					t.Fatalf("the next holder was served %v after the holder stopped trusting its lock, within the 2 s delay", gap)
				}
			})
		})
	}
}

// A Refresh under a lock delay sets what the Client trusts to its TTL, and the store keeps the
// lock the delay longer.
func TestLockDelayRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a := fencelock.New(store.Backend())
		defer a.Close()
		ctx := t.Context()
		lock, err := a.Obtain(ctx, "job", fencelock.WithTTL(time.Second), fencelock.WithLockDelay(2*time.Second), fencelock.WithWatchdog(false))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		start := time.Now()
		if err := lock.Refresh(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if until := lock.ValidUntil().Sub(start); until > 5*time.Second || until < 4*time.Second {
			t.Fatalf("trusted %v after a Refresh to 5 s", until)
		}
		if info, err := a.Inspect(ctx, "job"); err != nil || info.Remaining != 7*time.Second {
			t.Fatalf("the store keeps the lock %v after a Refresh to 5 s under a 2 s delay (%v), want 7 s", info.Remaining, err)
		}
	})
}

// A waiter handed a lock under a delay longer than the TTL gets a lock trusted for its TTL.
// (The memory store hands a lock over for its whole TTL; the short claims of Redis's hand-overs,
// renewed before Obtain returns, are conformance case LockDelay's.)
func TestLockDelayLongerThanAHandOverClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		ctx := t.Context()
		first, err := a.Obtain(ctx, "job", fencelock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = first.Release(context.Background())
		}()
		lock, err := b.Obtain(ctx, "job", fencelock.WithTTL(10*time.Second), fencelock.WithLockDelay(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		if err := lock.Valid(); err != nil {
			t.Fatalf("a hand-over under a 20 s delay: %v", err)
		}
		if left := time.Until(lock.ValidUntil()); left < 9*time.Second {
			t.Fatalf("a hand-over under a 20 s delay is trusted for %v, want its 10 s TTL less drift", left)
		}
	})
}

// A store whose locks end with a session cannot keep one a delay longer: WithLockDelay is
// refused there, as a negative delay is everywhere.
func TestLockDelayBadInput(t *testing.T) {
	store := memorybackend.New()
	session := fencelock.New(sessionStore{store.Backend()})
	defer session.Close()
	c := fencelock.New(store.Backend())
	defer c.Close()
	for _, try := range []struct {
		c    *fencelock.Client
		opts []fencelock.Option
	}{
		{session, []fencelock.Option{fencelock.WithLockDelay(time.Second)}},
		{c, []fencelock.Option{fencelock.WithLockDelay(-time.Second)}},
		{c, []fencelock.Option{fencelock.WithLockDelay(time.Microsecond)}},
		{c, []fencelock.Option{fencelock.WithTTL(10 * time.Millisecond), fencelock.WithLockDelay(3 * time.Second)}},
	} {
		if l, err := try.c.TryObtain(context.Background(), "x", try.opts...); !errors.Is(err, fencelock.ErrInvalid) {
			if l != nil {
				_ = l.Release(context.Background())
			}
			t.Fatalf("a lock delay the Client cannot keep: %v, want ErrInvalid", err)
		}
	}
}

// A Refresh to a TTL too short for the lock's delay is bad input, as it is at Obtain: the
// drift allowance on TTL and delay together would leave the lock trusted for nothing. Found by
// the simulation (seed 1): a Refresh to 10 ms under a 3 s delay lost the lock at once.
func TestLockDelayRefreshTooShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a := fencelock.New(store.Backend())
		defer a.Close()
		ctx := t.Context()
		lock, err := a.Obtain(ctx, "job", fencelock.WithTTL(time.Second), fencelock.WithLockDelay(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		if err := lock.Refresh(ctx, 10*time.Millisecond); !errors.Is(err, fencelock.ErrInvalid) {
			t.Fatalf("a Refresh to 10 ms under a 3 s delay: %v, want ErrInvalid", err)
		}
		if err := lock.Valid(); err != nil {
			t.Fatalf("the lock after a refused Refresh: %v", err)
		}
	})
}
