package redisbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// publishes returns how many PUBLISH and SPUBLISH calls the server has run.
func publishes(t *testing.T, ctx context.Context, rdb *redis.Client) int {
	t.Helper()
	n, err := testserver.CommandCalls(ctx, rdb, "publish", "spublish")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A release that nobody waits for publishes nothing; one that a watcher waits for wakes it.
func TestReleaseAnnouncedOnlyToListeners(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	defer b.Close()
	c := fencelock.New(b)
	defer c.Close()

	before := publishes(t, ctx, rdb)
	for range 5 {
		l, err := c.TryObtain(ctx, "unwatched")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := publishes(t, ctx, rdb) - before; n != 0 {
		t.Errorf("5 releases nobody listened for published %d messages, want 0", n)
	}

	l, err := c.TryObtain(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	released, stop, err := b.WatchRelease(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher of a release was not woken within 5s")
	}
}

// A release that hands the lock to the next in line is announced to whoever watches the
// lock's holder (Election.Observe): it was told to the waiter alone, and an observer learned
// of the new term only at its next poll.
func TestHandOverAnnouncedToHolderWatchers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	newBackend := func() *redisbackend.Backend {
		b := redisbackend.New(rdb)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	holder := fencelock.New(newBackend())
	defer holder.Close()
	inLine := make(chan struct{}, 1)
	waiter := fencelock.New(newBackend(), fencelock.WithObserver(func(e fencelock.Event) {
		if e.Kind == fencelock.EventWaiting {
			inLine <- struct{}{}
		}
	}))
	defer waiter.Close()
	first, err := holder.Obtain(ctx, "handed")
	if err != nil {
		t.Fatal(err)
	}
	changed, stop, err := newBackend().WatchHolder(ctx, "handed")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	next := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := waiter.Obtain(ctx, "handed")
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	select {
	case <-inLine:
	case <-ctx.Done():
		t.Fatal("the second caller never waited in line")
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-next
	if second == nil {
		return
	}
	defer second.Release(ctx)
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the hand-over was never announced to the holder's watcher")
	}
}
