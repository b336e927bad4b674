package etcdbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
)

// A waiter for a permit reads the semaphore again only when a key ahead of it, or its own,
// changes: waiters who join behind it and leave again give it nothing. Before, every change
// under the semaphore woke every waiter to a read, so that a line of n waiters cost n reads
// for each newcomer.
func TestPermitWaiterIsNotWokenByOthersBehindIt(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	ob, _ := newBackend(t, etcd)
	wb, kv, watches := countedBackend(t)
	const name = "permit-behind"
	holder, err := newLocker(t, hb).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := later(t, func() (*fencelock.Lock, error) { return newLocker(t, wb).Semaphore(name, 1).Acquire(ctx) })
	waitKeysUnder(t, cli, hb.PermitKey(name, ""), 2)
	// Its watch made, and the read it makes once the watch exists answered.
	watches.waitWatching(t, 1)
	testserver.WaitFor(t, 10*time.Second, "the waiter's read after its watch", func() bool {
		return kv.count.Load() > watches.txnsAtCreated.Load()
	})
	before := kv.count.Load()
	others := newLocker(t, ob).Semaphore(name, 1)
	for range 3 {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := others.Acquire(short)
		cancel()
		if !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("a newcomer's Acquire of a full semaphore: %v, want ErrNotObtained", err)
		}
	}
	waitKeysUnder(t, cli, hb.PermitKey(name, ""), 2) // the newcomers are gone
	time.Sleep(100 * time.Millisecond)               // and their events delivered
	if n := kv.count.Load() - before; n != 0 {
		t.Errorf("the waiter made %d transactions while others joined behind it and left, want none", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
