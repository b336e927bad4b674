package fencelock_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// staleReads is a Backend whose next Inspect, once armed, answers what an earlier one did: a
// read from a replica that lags, or a quorum read that met a minority still settling.
type staleReads struct {
	*memorybackend.Backend
	mu    sync.Mutex
	stale *fencelock.Info
}

func (b *staleReads) Inspect(ctx context.Context, name string) (fencelock.Info, error) {
	b.mu.Lock()
	stale := b.stale
	b.stale = nil
	b.mu.Unlock()
	if stale != nil {
		return *stale, nil
	}
	return b.Backend.Inspect(ctx, name)
}

// Observe never sends a term lower than one it has sent: a stale read of an earlier leader,
// after the next one was reported, is not news. It was sent, and Observe's terms went backwards
// (Redlock, 21-52 times a run).
func TestObserveTermsNeverGoBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &staleReads{Backend: memorybackend.New().Backend()}
		c := fencelock.New(b)
		defer c.Close()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		e := c.Election("observed")
		seen, err := e.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		next := func() fencelock.Leader { return <-seen }
		if l := next(); l.Elected {
			t.Fatalf("first report %+v, want no leader", l)
		}
		first, err := e.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if l := next(); l.Term != first.Term() {
			t.Fatalf("report %+v, want term %d", l, first.Term())
		}
		old, err := c.Inspect(ctx, "observed")
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		second, err := e.Campaign(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		for l := next(); l.Term != second.Term(); l = next() {
			if l.Elected {
				t.Fatalf("report %+v between the terms %d and %d", l, first.Term(), second.Term())
			}
		}
		b.mu.Lock()
		b.stale = &old // the next read says the first term still leads
		b.mu.Unlock()
		time.Sleep(3 * fencelock.ObserveInterval)
		if err := second.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if l := next(); l.Elected {
			t.Fatalf("after term %d, Observe sent %+v", second.Term(), l)
		}
	})
}
