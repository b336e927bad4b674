package redlock_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// A release that nobody waits for publishes nothing on any node; one that a watcher waits for
// wakes it.
func TestReleaseAnnouncedOnlyToListeners(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	_, as := startNodes(t, 3)
	cs := dial(t, as)
	publishes := func() int {
		n := 0
		for _, c := range cs {
			k, err := testserver.CommandCalls(ctx, c.(*redis.Client), "publish")
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}
	b := newBackend(t, cs)
	c := newLocker(t, b)
	before := publishes()
	for range 5 {
		l, err := c.TryObtain(ctx, "unwatched")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := publishes() - before; n != 0 {
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
