package zkbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// opGetChildren2 is ZooKeeper's opcode of the children read go-zookeeper sends.
const opGetChildren2 = 12

// A waiter with one node ahead of it, granted a moment after it joined the line, holds on the
// deletion of that node, which its watch reports, with no read after it: no node made later
// stands before it. Before, it read the line again, a round trip more in every owner change.
func TestWaiterWithOneAheadIsGrantedOnTheDeletion(t *testing.T) {
	holder, hb := newClient(t)
	admin := dial(t, server.Addr, nil)
	waiter, ops := countedClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	first, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := takeBehind(t, func() (*fencelock.Lock, error) { return waiter.Obtain(ctx, name) }, func() bool {
		return len(line(t, admin, hb.Path(name))) == 2
	})
	// Its read of the node ahead is answered, its watch set: the server counts a watcher there.
	ahead := hb.Path(name) + "/" + line(t, admin, hb.Path(name))[0]
	waitFor(t, 10*time.Second, "the waiter's watch on "+ahead, func() bool { return watches(t, hb.Path(name))[ahead] == 1 })
	before := ops.total()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if n := ops.total() - before; n != 0 {
		t.Errorf("the waiter sent %d requests between the release and its grant (%d children reads), want none", n, ops.count(opGetChildren2))
	}
	if l.Token() <= first.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", l.Token(), first.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, admin, hb.Path(name)) {
		t.Errorf("%s left behind after the last release", hb.Path(name))
	}
}

// A waiter with two nodes ahead does not take the deletion of the one just ahead for its turn:
// when that waiter leaves the line, the holder still holds, and the one behind waits on.
func TestWaiterBehindALeavingWaiterWaitsForTheHolder(t *testing.T) {
	holder, hb := newClient(t)
	leaver, _ := newClient(t)
	waiter, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := hb.Path(name)
	first, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := leaver.Obtain(leaving, name)
		left <- err
	}()
	waitFor(t, 10*time.Second, "the first waiter in line", func() bool { return len(line(t, admin, dir)) == 2 })
	got := takeBehind(t, func() (*fencelock.Lock, error) { return waiter.Obtain(ctx, name) }, func() bool {
		return len(line(t, admin, dir)) == 3
	})
	ahead := dir + "/" + line(t, admin, dir)[1]
	waitFor(t, 10*time.Second, "the last waiter's watch on "+ahead, func() bool { return watches(t, dir)[ahead] == 1 })
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that left: %v", err)
	}
	select {
	case l := <-got:
		t.Fatalf("granted token %d while the holder (token %d) held: it took the leaving waiter's deletion for its turn", l.Token(), first.Token())
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Valid(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= first.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", l.Token(), first.Token())
	}
	_ = l.Release(ctx)
}
