package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

type ctxKey struct{}

// The observer is told each call's context, so that a span can be parented to the caller's,
// and the hold's owner; a loss's event carries the context of the Obtain that made the hold,
// and names its cause.
func TestObserverGetsCallContextAndHold(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	rdb := singleClient(t)
	var mu sync.Mutex
	var events []fencelock.Event
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(func(e fencelock.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	t.Cleanup(func() { _ = c.Close() })
	name := lockName(t)
	call := context.WithValue(ctx, ctxKey{}, "obtain")
	lock, err := c.Obtain(call, name, fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Refresh(context.WithValue(ctx, ctxKey{}, "refresh"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key(name)).Err(); err != nil {
		t.Fatal(err)
	}
	<-lock.Context().Done()
	_ = lock.Release(context.WithValue(ctx, ctxKey{}, "release"))
	short, err := c.Obtain(ctx, lockName(t, "short"), fencelock.WithTTL(50*time.Millisecond), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	<-short.Context().Done()

	mu.Lock()
	defer mu.Unlock()
	want := map[fencelock.EventKind]string{fencelock.EventObtained: "obtain", fencelock.EventRenewed: "refresh", fencelock.EventReleased: "release", fencelock.EventLost: "obtain"}
	seen := map[fencelock.EventKind]bool{}
	causes := map[string]bool{}
	for _, e := range events {
		if e.Kind == fencelock.EventLost {
			causes[e.Cause()] = true
		}
		if e.Name != name {
			continue
		}
		v, ok := want[e.Kind]
		if !ok {
			continue
		}
		seen[e.Kind] = true
		if e.Context == nil || e.Context.Value(ctxKey{}) != v {
			t.Errorf("%v: context %v, want the %s call's", e.Kind, e.Context, v)
		}
		if e.Owner != lock.Owner() || e.Token != lock.Token() {
			t.Errorf("%v: owner %q token %d, want %q %d", e.Kind, e.Owner, e.Token, lock.Owner(), lock.Token())
		}
		if e.Kind == fencelock.EventReleased && (e.Took <= 0 || e.Result() != "not_held") {
			t.Errorf("the release of a lost lock: took %v, result %q", e.Took, e.Result())
		}
		if e.Kind == fencelock.EventObtained && e.Outcome() != "obtained" {
			t.Errorf("Outcome of an obtain: %q", e.Outcome())
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no %v event", k)
		}
	}
	if !causes["store"] || !causes["deadline"] {
		t.Errorf("loss causes seen: %v, want store (the key deleted) and deadline (the lock nothing renewed)", causes)
	}
	if (fencelock.Event{Kind: fencelock.EventNotObtained, Err: context.DeadlineExceeded}).Outcome() != "timeout" ||
		(fencelock.Event{Kind: fencelock.EventNotObtained, Err: &fencelock.HeldError{Name: "x"}}).Outcome() != "held" ||
		(fencelock.Event{Kind: fencelock.EventNotObtained, Err: errors.New("boom")}).Outcome() != "error" {
		t.Error("Outcome of a failed obtain")
	}
}
