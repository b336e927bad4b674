package fencelock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
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
