package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// A waiter stopped while in line (SIGSTOP: a GC pause, a stopped VM) is handed the lock by a
// release, the hand-over lapses, and another client takes the lock. When the waiter resumes,
// its Obtain must not return that lapsed hand-over as a valid lock: the grant's validity runs
// from when it was made, and a grant learned of late is checked against the store.
func TestPausedWaiterRefusesLapsedHandover(t *testing.T) {
	const ttl = 400 * time.Millisecond // a hand-over lasts min(TTL, 5s): the TTL here
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	holder, other := newLocker(t, rdb), newLocker(t, rdb)
	// Whether the resumed waiter sees the grant message or its timer first is up to the Go
	// scheduler: a few rounds see both orders.
	for round := range 6 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			name := lockName(t)
			first, err := holder.Obtain(ctx, name, fencelock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			w := startWorker(t, workerJob{Addr: single.Addr, Name: name, TTL: ttl})
			waitFor(t, 10*time.Second, "the worker never got in line", func() bool {
				return rdb.ZCard(ctx, b.Key(name)+":q").Val() == 1
			})
			w.stop()
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The release handed the lock to the stopped waiter; let that lapse and take it.
			var taken *fencelock.Lock
			waitFor(t, 10*time.Second, "the lapsed hand-over was never free", func() bool {
				taken, err = other.TryObtain(ctx, name, fencelock.WithTTL(30*time.Second))
				return err == nil
			})
			defer taken.Release(context.Background())
			w.resume()
			// A waiter that refuses the lapsed grant waits in line again behind the new holder,
			// so an Obtain that has not returned after a while is right.
			var r workerReport
			select {
			case r = <-w.report:
			case <-time.After(3 * time.Second):
				return
			}
			if r.Err == "" && r.Valid == "" && r.Token != taken.Token() {
				t.Fatalf("the resumed waiter holds token %d, valid for %v more, while token %d holds the lock", r.Token, r.Remaining, taken.Token())
			}
			if r.Err == "" && r.Token <= taken.Token() {
				t.Fatalf("the resumed waiter obtained token %d, not above the holder's %d", r.Token, taken.Token())
			}
		})
	}
}

// A hand-over lasts at most 5 s, whatever the TTL, until the new holder's first renewal: the
// client must measure its allowance for drift on those 5 s, not on the TTL, or a long TTL
// refuses every hand-over (the first waiter loses its turn) or loses it soon after.
func TestLongTTLHandover(t *testing.T) {
	for _, ttl := range []time.Duration{6 * time.Minute, 10 * time.Minute} {
		t.Run(ttl.String(), func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			rdb := singleClient(t)
			b := redisbackend.New(rdb)
			holder := newLocker(t, rdb)
			name := lockName(t)
			first, err := holder.Obtain(ctx, name, fencelock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				lock *fencelock.Lock
				err  error
			}
			got := make([]chan result, 2)
			for i := range got {
				got[i] = make(chan result, 1)
				c := newLocker(t, rdb)
				go func() {
					l, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl))
					got[i] <- result{l, err}
				}()
				// The second waiter gets in line after the first.
				waitFor(t, 5*time.Second, "waiter not in line", func() bool {
					return rdb.ZCard(ctx, b.Key(name)+":q").Val() == int64(i+1)
				})
			}
			// Every hand-over is announced on a grant channel of the lock: a refused one is
			// passed on to the next waiter, and shows as a second grant.
			grants := rdb.PSubscribe(ctx, b.Key(name)+":g:*")
			defer grants.Close()
			if _, err := grants.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-got[0]:
			case r = <-got[1]:
				t.Fatalf("the second waiter in line was served first (%v)", r.err)
			case <-time.After(10 * time.Second):
				t.Fatal("no waiter got the lock")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			handed := 0
			for {
				mctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := grants.ReceiveMessage(mctx)
				cancel()
				if err != nil {
					break
				}
				handed++
			}
			if handed != 1 {
				t.Fatalf("%d hand-overs before the first waiter held the lock, want 1", handed)
			}
			// The hand-over lasts 5 s; the first renewal, within a third of it, extends it to
			// the TTL. A lock trusted for the hand-over's length stays valid past it.
			time.Sleep(6 * time.Second)
			if err := r.lock.Valid(); err != nil {
				t.Fatalf("the handed-over lock was lost while Redis had it for %v: %v", rdb.PTTL(ctx, b.Key(name)).Val(), err)
			}
			if left := time.Until(r.lock.ValidUntil()); left < ttl/2 {
				t.Fatalf("after the first renewal the lock is valid for %v only (TTL %v)", left, ttl)
			}
			if err := r.lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			last := <-got[1]
			if last.err != nil {
				t.Fatal(last.err)
			}
			if err := last.lock.Release(ctx); !errors.Is(err, nil) {
				t.Fatal(err)
			}
		})
	}
}
