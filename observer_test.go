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
	// The loss is told to the observer after the lock's context ends.
	waitFor(t, 5*time.Second, "no loss event for one of the two lost locks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, e := range events {
			if e.Kind == fencelock.EventLost && (e.Token == short.Token() || e.Token == lock.Token()) {
				n++
			}
		}
		return n == 2
	})

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

// A term won just as Lead's context ends is resigned, not left to the watchdog, which would
// renew it for as long as the Client lives and keep every other contender out.
func TestLeadResignsATermWonAsItsContextEnds(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	rdb := singleClient(t)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	name := lockName(t)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	// The observer hears of the grant before Campaign returns it: the context ends right then.
	c := fencelock.New(b, fencelock.WithObserver(func(e fencelock.Event) {
		if e.Kind == fencelock.EventObtained && e.Name == name {
			cancel()
		}
	}))
	t.Cleanup(func() { _ = c.Close() })
	ran := false
	err := c.Election(name).Lead(lctx, "v", func(context.Context, int64) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Lead: %v, fn ran: %v", err, ran)
	}
	if l, err := c.Election(name).Leader(ctx); err != nil || l.Elected {
		t.Fatalf("after Lead returned, the election still has a leader: %+v, %v", l, err)
	}
}
