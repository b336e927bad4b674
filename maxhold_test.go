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

// WithMaxHold: the watchdog keeps a lock of a 1 s TTL for its 5 s cap and no longer. At the
// cap its context ends with ErrMaxHold and ErrLost, its validity never passed the cap, a
// Refresh did not move it past, and the Client released it: the next holder gets it at once.
func TestMaxHoldEndsTheLockAtItsCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		ctx := t.Context()
		start := time.Now()
		lock, err := a.Obtain(ctx, "job", fencelock.WithTTL(time.Second), fencelock.WithMaxHold(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(context.Background())
		capAt := start.Add(5 * time.Second)
		time.Sleep(4 * time.Second) // renewed all along
		if err := lock.Valid(); err != nil {
			t.Fatalf("within its cap: %v", err)
		}
		if err := lock.Refresh(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if until := lock.ValidUntil(); until.After(capAt) {
			t.Fatalf("a Refresh to 10 s moved the validity to %v, past the cap at %v", until.Sub(start), capAt.Sub(start))
		}
		<-lock.Context().Done()
		if at := time.Since(start); at != 5*time.Second {
			t.Fatalf("the lock's context ended %v after the grant, want at the 5 s cap", at)
		}
		cause := context.Cause(lock.Context())
		if !errors.Is(cause, fencelock.ErrMaxHold) || !errors.Is(cause, fencelock.ErrLost) || !errors.Is(cause, context.Canceled) {
			t.Fatalf("the cause at the cap: %v, want ErrMaxHold, ErrLost and context.Canceled", cause)
		}
		servedAt(t, b, "job", start, 5*time.Second)
	})
}

// A negative cap is bad input.
func TestMaxHoldNegativeIsInvalid(t *testing.T) {
	c := fencelock.New(memorybackend.New().Backend())
	defer c.Close()
	if _, err := c.TryObtain(context.Background(), "x", fencelock.WithMaxHold(-time.Second)); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("WithMaxHold(-1s): %v, want ErrInvalid", err)
	}
}

// A grant whose reply came later than the cap after its request was sent is capped from its
// arrival: the lock is not handed out lost, and ends at its cap.
func TestMaxHoldCountsFromTheGrantsArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		backend := store.Backend()
		a := fencelock.New(backend)
		defer a.Close()
		backend.DelayNextReply(2 * time.Second)
		lock, err := a.Obtain(t.Context(), "job", fencelock.WithTTL(5*time.Second), fencelock.WithMaxHold(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		defer lock.Release(context.Background())
		if err := lock.Valid(); err != nil {
			t.Fatalf("a lock whose grant came 2 s after its request, with a 1 s cap: %v at its grant", err)
		}
		<-lock.Context().Done()
		if at := time.Since(granted); at != time.Second {
			t.Fatalf("the lock ended %v after its grant arrived, want at its 1 s cap", at)
		}
	})
}
