package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/internal/testserver"
)

// countedBackend is a Backend on a client of its own whose transactions are counted, and
// whose watches are seen as they are made.
func countedBackend(t *testing.T) (*etcdbackend.Backend, *hookedKV, *seenWatches) {
	cli := etcd.Client(t)
	kv := &hookedKV{KV: cli.KV, n: -1}
	cli.KV = kv
	w := &seenWatches{Watcher: cli.Watcher, kv: kv}
	cli.Watcher = w
	b := etcdbackend.New(cli)
	t.Cleanup(func() { _ = b.Close() })
	return b, kv, w
}

// seenWatches passes on the responses of a client's watches, and counts those that told the
// watcher its watch was made (Created), once the watcher has each.
type seenWatches struct {
	clientv3.Watcher
	kv      *hookedKV
	created atomic.Int32
	// txnsAtCreated is the count of transactions when the last Created was passed on: the
	// watcher could not have made one after it yet.
	txnsAtCreated atomic.Int32
}

func (w *seenWatches) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if wr.Created {
				w.txnsAtCreated.Store(w.kv.count.Load())
			}
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
			if wr.Created {
				w.created.Add(1)
			}
		}
	}()
	return out
}

// waitWatching waits until the watcher has had n of its watches made.
func (w *seenWatches) waitWatching(t *testing.T, n int) {
	t.Helper()
	testserver.WaitFor(t, 10*time.Second, fmt.Sprintf("%d watches made", n), func() bool { return int(w.created.Load()) >= n })
}

// A waiter with one key ahead of it is granted on the deletion of that key, which its watch
// reports, with no read after it: no key made later can stand before it. Before, it read the
// queue again, a round trip more in every owner change.
func TestWaiterWithOneAheadIsGrantedOnTheDeletion(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	wb, kv, watches := countedBackend(t)
	const name = "granted-on-deletion"
	holder, err := newLocker(t, hb).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := obtainLater(t, ctx, wb, name)
	waitKeys(t, cli, hb, name, 2)
	watches.waitWatching(t, 1) // its read of the key ahead is answered, its watch made
	before := kv.count.Load()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if n := kv.count.Load() - before; n != 0 {
		t.Errorf("the waiter made %d transactions between the release and its grant, want none", n)
	}
	if l.Token() <= holder.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", l.Token(), holder.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter with two keys ahead watches both, and is granted on the deletion of the second
// with no read after either: before, it watched only the key just before it, and read the
// queue again when that went.
func TestWaiterWithTwoAheadIsGrantedOnTheLastDeletion(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	nb, _ := newBackend(t, etcd)
	wb, kv, watches := countedBackend(t)
	const name = "granted-on-last-deletion"
	holder, err := newLocker(t, hb).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	next := obtainLater(t, ctx, nb, name)
	waitKeys(t, cli, hb, name, 2)
	got := obtainLater(t, ctx, wb, name)
	waitKeys(t, cli, hb, name, 3)
	watches.waitWatching(t, 1) // the last waiter's read is answered, its watch made
	before := kv.count.Load()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	n := <-next
	if n == nil {
		t.FailNow()
	}
	select {
	case l := <-got:
		t.Fatalf("granted token %d while the next in line (token %d) held", l.Token(), n.Token())
	case <-time.After(100 * time.Millisecond):
	}
	if err := n.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if n := kv.count.Load() - before; n != 0 {
		t.Errorf("the last waiter made %d transactions between the first release and its grant, want none", n)
	}
	if l.Token() <= n.Token() {
		t.Errorf("the waiter's token %d is not above the one before it, %d", l.Token(), n.Token())
	}
	_ = l.Release(ctx)
}

// A waiter with two keys ahead does not take the deletion of the one just ahead for its turn:
// when that waiter leaves the line, the holder still holds, and the one behind waits on;
// whether it watches both keys ahead, or only the one just before it.
func TestWaiterBehindALeavingWaiterWaitsForTheHolder(t *testing.T) {
	t.Run("watching all ahead", testBehindALeavingWaiter)
	t.Run("watching one ahead", func(t *testing.T) {
		etcdbackend.WatchAllUpTo(t, 1)
		testBehindALeavingWaiter(t)
	})
}

func testBehindALeavingWaiter(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	b1, _ := newBackend(t, etcd)
	b2, _, watches := countedBackend(t)
	const name = "behind-a-leaver"
	holder, err := newLocker(t, hb).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := newLocker(t, b1).Obtain(leaving, name)
		left <- err
	}()
	waitKeys(t, cli, hb, name, 2)
	got := obtainLater(t, ctx, b2, name)
	waitKeys(t, cli, hb, name, 3)
	watches.waitWatching(t, 1) // the last waiter watches the one ahead of it
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that left: %v", err)
	}
	waitKeys(t, cli, hb, name, 2)
	select {
	case l := <-got:
		t.Fatalf("granted token %d while the holder (token %d) held: it took the leaving waiter's deletion for its turn", l.Token(), holder.Token())
	case <-time.After(300 * time.Millisecond):
	}
	if err := holder.Valid(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= holder.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", l.Token(), holder.Token())
	}
	_ = l.Release(ctx)
}

// obtainLater obtains name through a Client on b in a goroutine, and sends the lock, or nil
// when the Obtain failed.
func obtainLater(t *testing.T, ctx context.Context, b *etcdbackend.Backend, name string) <-chan *fencelock.Lock {
	return later(t, func() (*fencelock.Lock, error) { return newLocker(t, b).Obtain(ctx, name) })
}

// later runs take in a goroutine, and sends the lock it took, or nil when it failed.
func later(t *testing.T, take func() (*fencelock.Lock, error)) <-chan *fencelock.Lock {
	got := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := take()
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}
