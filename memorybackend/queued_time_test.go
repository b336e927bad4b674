package memorybackend

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// A queued acquisition that reaches the store late (here the simulation's gate holds it; a
// Backend's Partition does the same) must run at the store's time when it runs, not at the
// time its call began: run at that earlier time, it found a lock expired then and handed it
// to the waiter in line with an expiry counted from then, which had passed already, while the
// waiter, told now, trusted it a whole TTL from now. The next store operation handed the
// lock on to another owner at once, and both believed it theirs. The simulation found it
// (seed 380911742: "w2 acts on leader e0 with token 7844 while token 7845 is believed valid").
func TestQueuedCallRunsAtTheStoresTimeWhenItArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := New()
		holder, waiter, late := s.Backend(), s.Backend(), s.Backend()
		// Each is held up once. (Not with a sync.Once: a second caller would wait on its
		// mutex, which the bubble does not count as durably blocked.)
		var expiry, queue atomic.Bool
		s.gate = func(ctx context.Context, b *Backend, op, name string) {
			switch {
			case op == "expire" && expiry.CompareAndSwap(false, true):
				time.Sleep(time.Second) // the holder's expiry waits
			case b == late && op == "queue" && queue.CompareAndSwap(false, true):
				time.Sleep(250 * time.Millisecond)
			}
		}
		defer time.Sleep(2 * time.Second) // and the held-up expiry ends before the bubble
		if _, err := holder.Acquire(ctx, driver.Request{Name: "x", Owner: "holder", Hold: "h", TTL: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		type result struct {
			g   driver.Grant
			err error
		}
		waited := make(chan result, 1)
		began := time.Now()
		go func() {
			g, err := waiter.AcquireQueued(ctx, driver.Request{Name: "x", Owner: "waiter", Hold: "w", TTL: 200 * time.Millisecond})
			waited <- result{g, err}
		}()
		synctest.Wait()                    // the waiter is in line
		time.Sleep(150 * time.Millisecond) // the holder's lock expired 50 ms ago, unprocessed
		lctx, cancel := context.WithCancel(ctx)
		lateDone := make(chan struct{})
		go func() {
			defer close(lateDone)
			_, _ = late.AcquireQueued(lctx, driver.Request{Name: "x", Owner: "late", Hold: "l", TTL: time.Second})
		}()
		defer func() { cancel(); <-lateDone }()
		r := <-waited
		if r.err != nil {
			t.Fatal(r.err)
		}
		trusted := began.Add(r.g.Elapsed).Add(200 * time.Millisecond)
		info, err := holder.Inspect(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if info.Owner != "waiter" {
			t.Fatalf("the store holds x for %q (token %d) at %v, while the waiter, handed token %d, trusts it for %v more",
				info.Owner, info.Token, time.Since(began), r.g.Token, time.Until(trusted))
		}
	})
}
