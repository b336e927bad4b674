package fencelock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
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
				servedAt(t, b, "nightly", start, 5*time.Second)
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

// A release before the minimum that cannot reach the store says so: the lock keeps the TTL it
// had, and may go before the minimum.
func TestMinHoldReleaseCutOffSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		backend := store.Backend()
		a := fencelock.New(backend)
		defer a.Close()
		lock, err := a.Obtain(t.Context(), "nightly", fencelock.WithTTL(time.Second), fencelock.WithMinHold(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		backend.Partition(10 * time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("a release before the minimum, cut off from the store: %v, want ErrUnavailable", err)
		}
		if lock.Context().Err() == nil {
			t.Fatal("the handle lives on after its release")
		}
	})
}

// A release before the minimum whose Refresh is cut off from the store (its context ends
// while the store is out of reach) is tried again in the background: once the store is back,
// the lock's TTL ends at the minimum, not at the TTL it had, and the next holder is served
// no sooner than the minimum. Before, the Client only released the lock at the minimum, and
// the store let it go when its 1 s TTL ran out: the next holder was served at 1 s.
func TestMinHoldReleaseCutOffIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		backend := store.Backend()
		a, b := fencelock.New(backend), fencelock.New(store.Backend())
		defer b.Close()
		defer a.Close()
		start := time.Now()
		lock, err := a.Obtain(t.Context(), "nightly", fencelock.WithTTL(time.Second), fencelock.WithMinHold(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		const cut = 300 * time.Millisecond
		backend.Partition(cut)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("a release before the minimum, cut off from the store: %v, want ErrUnavailable", err)
		}
		next, err := b.Obtain(t.Context(), "nightly", fencelock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer next.Release(context.Background())
		// The retry's TTL, counted from its send, reaches the store when the cut ends: the
		// lock may end later than the minimum by as much, never sooner.
		if at := time.Since(start); at < 5*time.Second || at > 5*time.Second+cut {
			t.Fatalf("the next holder was served %v after the first one's grant, want from 5s to %v", at, 5*time.Second+cut)
		}
	})
}

// The same on Redis, behind a link the test cuts (connections reset, new ones refused): the
// release before the minimum returns ErrUnavailable; once the link is back, the Client sets
// the lock's TTL to the rest of the minimum from the background (EventCleanup, no error), and
// the next holder is served no sooner than the minimum, not when the 1 s TTL the lock had runs
// out. The retries come 10 ms, 110 ms and 610 ms after the release returned: the first lands
// well inside that TTL however busy the machine.
func TestMinHoldReleaseCutOffOnRedis(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	ev := newEvents()
	a, proxy := unreachable(t, fencelock.WithObserver(ev.observe))
	b := newLocker(t, singleClient(t))
	name := lockName(t)
	const minHold = 4 * time.Second
	start := time.Now()
	lock, err := a.Obtain(ctx, name, fencelock.WithTTL(time.Second), fencelock.WithMinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = lock.Release(rctx)
	cancel()
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a release before the minimum, cut off from Redis: %v, want ErrUnavailable", err)
	}
	proxy.Restore()
	// The next holder waits from now on: it is served when the lock goes.
	served := make(chan error, 1)
	var at time.Duration
	go func() {
		next, err := b.Obtain(ctx, name, fencelock.WithTTL(time.Second))
		if err == nil {
			at = time.Since(start)
			err = next.Release(ctx)
		}
		served <- err
	}()
	if e := ev.next(t, fencelock.EventCleanup, name); e.Err != nil {
		t.Fatalf("the minimum set from the background: %v", e.Err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if at < minHold {
		t.Fatalf("the next holder was served %v after the first one's grant, before the %v minimum", at, minHold)
	}
}

// A lock that ends without a release before its minimum hold has passed — at its cap, or with
// its Client closed — is trusted no more, but its name stays taken until the minimum: the
// next holder is served then, not before.
func TestMinHoldOutlivesTheCapAndClose(t *testing.T) {
	for _, end := range []string{"cap", "close"} {
		t.Run(end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memorybackend.New()
				a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
				defer b.Close()
				ctx := t.Context()
				start := time.Now()
				lock, err := a.Obtain(ctx, "nightly", fencelock.WithTTL(time.Second), fencelock.WithMaxHold(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				// A second hold of the same lock asks for a longer minimum than the cap.
				again, err := a.Obtain(lock.Context(), "nightly", fencelock.WithMinHold(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if end == "close" {
					if err := a.Close(); err != nil {
						t.Fatal(err)
					}
				} else {
					defer a.Close()
					<-again.Context().Done()
				}
				if lock.Valid() == nil {
					t.Fatal("the lock is trusted still")
				}
				servedAt(t, b, "nightly", start, 5*time.Second)
			})
		})
	}
}

// A lock lost at its validity deadline before its minimum hold, released by its holder after,
// is not released in the store by that late Release: the Client keeps it until the minimum,
// and the Release says the lock was not held. Found by the simulation (seed 1, 40,000
// operations, FENCELOCK_SIM_OPS=40000): the late Release ended the lock the Client kept.
func TestMinHoldLostThenReleasedKeepsTheName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		ctx := t.Context()
		start := time.Now()
		lock, err := a.Obtain(ctx, "nightly", fencelock.WithTTL(time.Second), fencelock.WithWatchdog(false), fencelock.WithMinHold(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		<-lock.Context().Done()
		time.Sleep(200 * time.Millisecond)
		if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) || !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("the release of a lock lost at its deadline: %v, want ErrNotHeld and ErrLost", err)
		}
		servedAt(t, b, "nightly", start, 5*time.Second)
	})
}

// A lock kept for its minimum hold after its release, which the same owner enters again: the
// second hold is lost at its deadline while a Refresh of it (to 40 ms, counting it as the
// Client's one hold) waits on its way to the store. The Client's undo of the lost hold must
// not reach the store before that Refresh: the store would find the kept hold alone, take it
// for the Refresh's, and cut the minimum hold to 40 ms. Found by the simulation (seed 1000,
// TestSimulationRegressions, about once in 60 replays under load).
func TestMinHoldKeptBesideALostHoldsRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		gated := &heldRenew{Backend: store.Backend(), arrived: make(chan struct{}, 1), gate: make(chan struct{})}
		a, b := fencelock.New(gated), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		ctx := t.Context()
		start := time.Now()
		first, err := a.Obtain(ctx, "nightly", fencelock.WithOwner("o"), fencelock.WithTTL(time.Second), fencelock.WithMinHold(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		again, err := a.Obtain(ctx, "nightly", fencelock.WithOwner("o"), fencelock.WithTTL(time.Second), fencelock.WithWatchdog(false))
		if err != nil || again.HoldCount() != 2 {
			t.Fatalf("the owner's second Obtain: %v, %v; want it to enter the kept lock (count 2)", err, again)
		}
		gated.held.Store(true)
		refreshed := make(chan error, 1)
		go func() { refreshed <- again.Refresh(context.Background(), 40*time.Millisecond) }()
		<-gated.arrived
		<-again.Context().Done() // lost at the deadline the Refresh on its way set
		synctest.Wait()          // the Client's clean-up of the lost hold has done what it does
		close(gated.gate)
		<-refreshed
		time.Sleep(100 * time.Millisecond)
		var held *fencelock.HeldError
		if l, err := b.TryObtain(ctx, "nightly"); !errors.As(err, &held) {
			if l != nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("TryObtain %v after the first grant, within its 3s minimum: %v, want a *HeldError", time.Since(start), err)
		}
		servedAt(t, b, "nightly", start, 3*time.Second)
	})
}

// heldRenew holds each Renew at a gate, once held is set, before it reaches the store: arrived
// is sent to when one waits there.
type heldRenew struct {
	fencelock.Backend
	held    atomic.Bool
	arrived chan struct{}
	gate    chan struct{}
}

// ExpiresByTTL: the memory store's locks end by their TTL (driver.Expirer), which the
// embedded interface would hide.
func (g *heldRenew) ExpiresByTTL() bool { return true }

func (g *heldRenew) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	if g.held.Load() {
		select {
		case g.arrived <- struct{}{}:
		default:
		}
		<-g.gate
	}
	return g.Backend.Renew(ctx, leases)
}

// servedAt obtains name on c and checks, in virtual time, that the grant came want after start:
// when the first holder's minimum or cap let the name go, not before, not later.
func servedAt(t *testing.T, c *fencelock.Client, name string, start time.Time, want time.Duration) {
	t.Helper()
	next, err := c.Obtain(t.Context(), name, fencelock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(context.Background())
	if at := time.Since(start); at != want {
		t.Fatalf("the next holder was served %v after the first one's grant, want %v", at, want)
	}
}
