package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// A deadline timer that fires before its hold has stored it (the scheduler ran its goroutine
// first, or the holder's process was stopped after the grant's check and the deadline passed)
// finds the timer there: the hold keeps its deadline, or is lost at it. It found none, and the
// process died in hold.end (the nemesis, seed 633494415 on redis: "nil pointer dereference in
// time.(*Timer).Stop").
func TestDeadlineTimerThatFiresBeforeItIsStored(t *testing.T) {
	restore := fencelock.FireDeadlinesEarly(100 * time.Millisecond)
	defer restore()
	c := newLocker(t, singleClient(t))
	ctx := ctxTimeout(t, 10*time.Second)
	lock, err := c.TryObtain(ctx, lockName(t), fencelock.WithTTL(time.Second), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Valid(); err != nil {
		t.Fatalf("the early timer ended a lock within its deadline: %v", err)
	}
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock outlived its deadline by 4s without a renewal")
	}
	if err := lock.Valid(); err == nil {
		t.Fatal("valid past its deadline")
	}
}

// A holder that checks its lock past the deadline while a renewal's answer arrives: the check
// reads the deadline it decided on, under the hold's mutex, not the one the renewal is moving.
// Found by the race detector in TestLossSeenSynchronouslyAfterPause (a full run of the suite,
// 5 December 2026): valid formatted the loss from h.deadline after it had let go of the mutex,
// while the watchdog's renewal wrote it.
func TestValidPastTheDeadlineBesideARenewal(t *testing.T) {
	for range 100 {
		clock := &skewClock{}
		b := &gatedRenew{Backend: memorybackend.New().Backend(), arrived: make(chan struct{}, 1), gate: make(chan struct{})}
		c := fencelock.New(b, fencelock.WithClock(clock.now))
		ctx := t.Context()
		lock, err := c.Obtain(ctx, "x", fencelock.WithTTL(time.Second), fencelock.WithWatchdog(false))
		if err != nil {
			t.Fatal(err)
		}
		refreshed := make(chan error, 1)
		go func() { refreshed <- lock.Refresh(context.Background(), time.Second) }()
		<-b.arrived // the store renewed; its answer waits at the gate
		clock.advance(time.Second)
		close(b.gate) // the answer arrives as the holder checks its lock
		if err := lock.Valid(); err != nil && !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("Valid past the deadline: %v, want nil or ErrLost", err)
		}
		<-refreshed
		_ = lock.Release(ctx)
		_ = c.Close()
	}
}

// gatedRenew holds the answer of each Renew at a gate: arrived is sent to once the store has
// renewed, and the answer returns when gate is closed.
type gatedRenew struct {
	fencelock.Backend
	arrived chan struct{}
	gate    chan struct{}
}

func (g *gatedRenew) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	r := g.Backend.Renew(ctx, leases)
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	<-g.gate
	return r
}
