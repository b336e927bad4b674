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
