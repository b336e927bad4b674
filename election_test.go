package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// A leader resuming from a pause past its term's validity sees the loss through the context
// Lead gave fn on its very next check, as Leadership.Context() does: before any timer of the
// Client could have fired. fn's context was a plain cancel context around the term's, which
// read no clock: a worker paused by SIGSTOP acted as leader at the moment it resumed, beside
// the leader elected meanwhile.
func TestLeadContextReadsTheClock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clock := &skewClock{}
	c := newLocker(t, singleClient(t), fencelock.WithClock(clock.now))
	const ttl = 10 * time.Second
	var errAfter error
	var doneAfter bool
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	err := c.Election(lockName(t), fencelock.WithTTL(ttl)).Lead(lctx, "v", func(fctx context.Context, term int64) error {
		if err := fctx.Err(); err != nil {
			t.Errorf("fn's context ended at the start of the term: %v", err)
		}
		clock.advance(2 * ttl) // the pause: no timer fires, the clock moves on
		errAfter = fctx.Err()
		select {
		case <-fctx.Done():
			doneAfter = true
		default:
		}
		stop() // one term is the test
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Lead = %v, want context.Canceled", err)
	}
	if !errors.Is(errAfter, fencelock.ErrLost) {
		t.Errorf("right after the pause, fn's ctx.Err() = %v; want an error matching ErrLost", errAfter)
	}
	if !doneAfter {
		t.Error("right after the pause, fn's ctx.Done() was not closed")
	}
}

// OnNewLeader tells every instance who leads, in order: no one, each term, a new value, no
// one again; stop waits for the callback.
func TestOnNewLeader(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	rdb := singleClient(t)
	name := lockName(t)
	follower := newLocker(t, rdb).Election(name)
	if _, err := follower.OnNewLeader(ctx, nil); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("OnNewLeader with a nil function: %v, want ErrInvalid", err)
	}
	told := make(chan fencelock.Leader)
	stop, err := follower.OnNewLeader(ctx, func(l fencelock.Leader) { told <- l })
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) fencelock.Leader {
		t.Helper()
		select {
		case l := <-told:
			return l
		case <-ctx.Done():
			t.Fatalf("OnNewLeader told nothing, waiting for %s", want)
		}
		return fencelock.Leader{}
	}
	if l := next("no leader"); l.Elected {
		t.Fatalf("first call: %+v, want no leader", l)
	}
	e := newLocker(t, rdb).Election(name, fencelock.WithTTL(5*time.Second))
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if l := next("a's term"); l.Term != a.Term() || l.Value != "a" {
		t.Fatalf("after a was elected: %+v, want term %d", l, a.Term())
	}
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if l := next("a's new value"); l.Term != a.Term() || l.Value != "a2" {
		t.Fatalf("after a proclaimed a2: %+v", l)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := next("no leader"); l.Elected {
		t.Fatalf("after a resigned: %+v, want no leader", l)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// A call under way when stop came is waited for; none follows.
	select {
	case l := <-told:
		t.Logf("a last change told while stopping: %+v", l)
	case <-stopped:
	}
	<-stopped
	stop() // again: nothing to do
}

// A Lead's fn, which has no Leadership, proclaims a new value through its Election: Leader
// sees it in the same term. Without a running term it is ErrNotHeld.
func TestElectionProclaimFromLead(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newLocker(t, singleClient(t))
	e := c.Election(lockName(t), fencelock.WithTTL(5*time.Second))
	if err := e.Proclaim(ctx, "idle"); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("Proclaim with no Lead running: %v, want ErrNotHeld", err)
	}
	err := e.Lead(ctx, "starting", func(fctx context.Context, term int64) error {
		if err := e.Proclaim(fctx, "serving"); err != nil {
			return err
		}
		l, err := e.Leader(fctx)
		if err != nil {
			return err
		}
		if l.Term != term || l.Value != "serving" {
			t.Errorf("Leader after Proclaim from fn: %+v, want term %d with value serving", l, term)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
