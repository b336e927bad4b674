package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// Healthy fails while Lead still runs fn for a term that ended more than the tolerance ago:
// here the term's lock is removed from the store, and fn ignores its context. It holds while
// the term is valid, within the tolerance, and once fn returned.
func TestHealthyFailsWhenFnOutlivesItsTerm(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	clock := &skewClock{}
	rdb := singleClient(t)
	c := newLocker(t, rdb, fencelock.WithClock(clock.now))
	name := lockName(t)
	e := c.Election(name, fencelock.WithTTL(2*time.Second))
	const tolerance = 10 * time.Second
	if err := e.Healthy(-time.Second); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("Healthy with a negative tolerance: %v, want ErrInvalid", err)
	}
	if err := e.Healthy(tolerance); err != nil {
		t.Fatalf("Healthy before Lead: %v", err)
	}
	started := make(chan context.Context, 1)
	finish := make(chan struct{})
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- e.Lead(lctx, "v", func(fctx context.Context, term int64) error {
			started <- fctx
			<-finish // ignores fctx: still believes it leads
			stop()
			return nil
		})
	}()
	var fctx context.Context
	select {
	case fctx = <-started:
	case err := <-done:
		t.Fatalf("Lead returned %v before its first term", err)
	}
	if err := e.Healthy(tolerance); err != nil {
		t.Fatalf("Healthy while the term is valid: %v", err)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil || !info.Held {
		t.Fatalf("Inspect while leading: %+v, %v", info, err)
	}
	if err := rdb.Del(ctx, redisbackend.New(rdb).Key(name)).Err(); err != nil {
		t.Fatal(err)
	}
	<-fctx.Done() // the term is lost; fn runs on
	if err := e.Healthy(tolerance); err != nil {
		t.Fatalf("Healthy right after the term ended, within the tolerance: %v", err)
	}
	clock.advance(tolerance + time.Second)
	err = e.Healthy(tolerance)
	if !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Healthy %v after the term ended, fn still running: %v, want an error matching ErrLost", tolerance+time.Second, err)
	}
	t.Log(err)
	close(finish)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v, want context.Canceled", err)
	}
	if err := e.Healthy(tolerance); err != nil {
		t.Fatalf("Healthy after Lead returned: %v", err)
	}
}
