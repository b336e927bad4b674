package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// An Obtain waiting in line when its Client closes: the lock handed over to it afterwards is
// no one's, and must not keep the name taken for its 30 s TTL. The call returns ErrClosed,
// and the name is free for the next contender at once.
func TestCloseDuringWaitLeavesNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b, c := fencelock.New(store.Backend()), fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer c.Close()
		ctx := t.Context()
		held, err := a.Obtain(ctx, "x", fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := b.Obtain(ctx, "x", fencelock.WithTTL(30*time.Second))
			if err == nil {
				_ = l.Release(ctx)
			}
			got <- err
		}()
		synctest.Wait() // b waits in the store's line
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, fencelock.ErrClosed) {
			t.Fatalf("the closed Client's Obtain: %v, want ErrClosed", err)
		}
		synctest.Wait()
		next, err := c.TryObtain(ctx, "x")
		if err != nil {
			info, _ := c.Inspect(ctx, "x")
			t.Fatalf("%v after the release, the name is not free: %v (held %v by %.8s for %v more)", time.Since(start), err, info.Held, info.Owner, info.Remaining)
		}
		_ = next.Release(ctx)
	})
}

// A TryObtain whose outcome the Client cannot know (the store granted it, the answer was
// lost) when its Client closed during the call: the Client undoes such a grant in the
// background, but a closed Client has none. The call must release it itself, or the name is
// held for no one for the lock's TTL.
func TestCloseDuringAnUnansweredAcquireLeavesNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		late := &answerLost{Backend: store.Backend(), granted: make(chan struct{}), answer: make(chan struct{})}
		b, c := fencelock.New(late), fencelock.New(store.Backend())
		defer c.Close()
		ctx := t.Context()
		got := make(chan error, 1)
		go func() {
			l, err := b.TryObtain(ctx, "x", fencelock.WithTTL(30*time.Second))
			if err == nil {
				_ = l.Release(ctx)
			}
			got <- err
		}()
		<-late.granted
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		close(late.answer)
		if err := <-got; !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("the call whose answer was lost: %v, want ErrUnavailable", err)
		}
		synctest.Wait()
		next, err := c.TryObtain(ctx, "x")
		if err != nil {
			info, _ := c.Inspect(ctx, "x")
			t.Fatalf("after the call returned, the name is not free: %v (held %v by %.8s for %v more)", err, info.Held, info.Owner, info.Remaining)
		}
		_ = next.Release(ctx)
	})
}

// answerLost is a backend whose Acquire the store grants, but whose answer is lost: the call
// returns, when told to, as one that timed out.
type answerLost struct {
	driver.Backend
	granted, answer chan struct{}
}

func (b *answerLost) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if _, err := b.Backend.Acquire(ctx, req); err != nil {
		return driver.Grant{}, err
	}
	close(b.granted)
	<-b.answer
	return driver.Grant{}, fmt.Errorf("%w: the answer was lost", driver.ErrUnavailable)
}

// The release that a call of a closed Client makes itself (above, and for a hand-over that
// arrived after Close) is a clean-up like the background's, and the observer hears of it as
// of those: done, or failed (ErrClosed: no background is left to try again, and the lock
// expires by its TTL). A success was silent, so that clean-ups counted by an observer missed
// it.
func TestCloseDuringAnUnansweredAcquireReportsItsCleanup(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("release refused %v", refused), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memorybackend.New()
				late := &answerLost{Backend: store.Backend(), granted: make(chan struct{}), answer: make(chan struct{})}
				var backend driver.Backend = late
				if refused {
					backend = releaseRefused{late}
				}
				var mu sync.Mutex
				var cleanups []fencelock.Event
				b := fencelock.New(backend, fencelock.WithObserver(func(e fencelock.Event) {
					if e.Kind == fencelock.EventCleanup {
						mu.Lock()
						cleanups = append(cleanups, e)
						mu.Unlock()
					}
				}))
				ctx := t.Context()
				got := make(chan error, 1)
				go func() {
					_, err := b.TryObtain(ctx, "x", fencelock.WithTTL(30*time.Second))
					got <- err
				}()
				<-late.granted
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				close(late.answer)
				<-got
				mu.Lock()
				defer mu.Unlock()
				if len(cleanups) != 1 || cleanups[0].Name != "x" {
					t.Fatalf("clean-up events of the call: %+v, want one for x", cleanups)
				}
				if err := cleanups[0].Err; refused != (err != nil) {
					t.Fatalf("the clean-up's error: %v, want an error %v", err, refused)
				}
			})
		})
	}
}

// releaseRefused is a backend whose Release fails as a store out of reach does.
type releaseRefused struct{ driver.Backend }

func (b releaseRefused) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	return 0, fmt.Errorf("%w: the store is out of reach", driver.ErrUnavailable)
}
