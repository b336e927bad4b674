package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// WithTokenBase adds its base to every token the Client hands out, in every place it is seen:
// the Lock, the leader's term, the observer's events, Inspect, List and a semaphore's Inspect;
// the store keeps its own, which the package-level List reports.
func TestTokenBaseEverywhereATokenIsSeen(t *testing.T) {
	ctx := context.Background()
	const base = 1 << 50
	store := memorybackend.New()
	var mu sync.Mutex
	var events []fencelock.Event
	c := fencelock.New(store.Backend(), fencelock.WithTokenBase(base), fencelock.WithObserver(func(e fencelock.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	defer c.Close()
	plain := fencelock.New(store.Backend())
	defer plain.Close()

	lock, err := c.Obtain(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := plain.Inspect(ctx, "job")
	if err != nil || raw.Token == 0 {
		t.Fatalf("Inspect without a base: %+v, %v", raw, err)
	}
	if lock.Token() != raw.Token+base {
		t.Fatalf("Token() = %d, want the store's %d + %d", lock.Token(), raw.Token, int64(base))
	}
	if info, err := c.Inspect(ctx, "job"); err != nil || info.Token != lock.Token() {
		t.Fatalf("Inspect: %+v, %v; want token %d", info, err, lock.Token())
	}
	if infos, err := c.List(ctx, "jo"); err != nil || len(infos) != 1 || infos[0].Token != lock.Token() {
		t.Fatalf("List: %+v, %v; want token %d", infos, err, lock.Token())
	}
	if infos, err := fencelock.List(ctx, store.Backend(), "jo"); err != nil || len(infos) != 1 || infos[0].Token != raw.Token {
		t.Fatalf("the package's List: %+v, %v; want the store's token %d", infos, err, raw.Token)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, e := range events {
		if e.Token != 0 && e.Token != lock.Token() {
			t.Errorf("%v event of token %d, want %d", e.Kind, e.Token, lock.Token())
		}
	}
	mu.Unlock()

	p, err := c.Semaphore("pool", 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	si, err := c.Semaphore("pool", 2).Inspect(ctx)
	if err != nil || len(si.Permits) != 1 || si.Permits[0].Token != p.Token() || si.Token < p.Token() {
		t.Fatalf("a semaphore's Inspect: %+v, %v; want its permit's token %d", si, err, p.Token())
	}
	rawSem, err := plain.Semaphore("pool", 2).Inspect(ctx)
	if err != nil || rawSem.Permits[0].Token != p.Token()-base {
		t.Fatalf("a semaphore's Inspect without a base: %+v, %v; want %d", rawSem, err, p.Token()-base)
	}
	_ = p.Release(ctx)

	e := c.Election("leader", fencelock.WithTTL(time.Second))
	l, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	if who, err := e.Leader(ctx); err != nil || who.Term != l.Term() || l.Term() < base {
		t.Fatalf("Leader: %+v, %v; want term %d, above the base", who, err, l.Term())
	}
}

func TestTokenBaseOutOfRange(t *testing.T) {
	for _, base := range []int64{-1, fencelock.MaxTokenBase + 1} {
		c := fencelock.New(memorybackend.New().Backend(), fencelock.WithTokenBase(base))
		if _, err := c.TryObtain(context.Background(), "x"); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("WithTokenBase(%d): TryObtain: %v, want ErrInvalid", base, err)
		}
		_ = c.Close()
	}
}
