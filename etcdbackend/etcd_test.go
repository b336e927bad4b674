package etcdbackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
)

// Waiters get the lock in the order they queued, each woken by its predecessor's release.
func TestFairQueue(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	b, cli := newBackend(t, etcd)
	holder := newLocker(t, b)
	name := "fair"
	first, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var mu sync.Mutex
	var order []int
	done := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		w, _ := newBackend(t, etcd)
		c := newLocker(t, w)
		go func() {
			l, err := c.Obtain(ctx, name)
			if err == nil {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				err = l.Release(ctx)
			}
			done <- err
		}()
		// Queue the next waiter only after this one's key is in place.
		waitKeys(t, cli, b, name, i+2)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("waiters obtained in order %v, want 0..%d", order, waiters-1)
		}
	}
}

// waitKeys waits until the queue of name has n keys.
func waitKeys(t *testing.T, cli *clientv3.Client, b *etcdbackend.Backend, name string, n int) {
	t.Helper()
	waitKeysUnder(t, cli, b.Key(name, ""), n)
}

// waitKeysUnder waits until n keys start with pfx.
func waitKeysUnder(t *testing.T, cli *clientv3.Client, pfx string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(context.Background(), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys under %q, want %d", resp.Count, pfx, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A waiter whose context ends leaves the queue: its key is deleted.
func TestWaiterLeavesQueue(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, cli := newBackend(t, etcd)
	c := newLocker(t, b)
	name := "leaves"
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newBackend(t, etcd)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = newLocker(t, w).Obtain(short, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	waitKeys(t, cli, b, name, 1)
	_ = lock.Release(ctx)
	waitKeys(t, cli, b, name, 0)
}

// A holder whose keep-alive stops loses the lock when its lease expires: the waiter gets it,
// the old holder's context is cancelled, and its writes are refused both by a guarded etcd
// transaction and by a fence guard.
func TestLeaseExpiry(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	ba, cli := newBackend(t, etcd)
	a := newLocker(t, ba)
	name := "expiry"
	lockA, err := a.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := newBackend(t, etcd)
	b := newLocker(t, bb)
	got := later(t, func() (*fencelock.Lock, error) { return b.Obtain(ctx, name) })
	var store fence.Memory
	if err := store.Check(name, lockA.Token()); err != nil {
		t.Fatal(err)
	}

	ba.StopKeepAlive() // the process stops reaching etcd; its lease runs out
	var lockB *fencelock.Lock
	select {
	case lockB = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the lock after the holder's lease expired")
	}
	if lockB == nil {
		t.FailNow()
	}
	defer lockB.Release(ctx)
	select {
	case <-lockA.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the old holder's context was not cancelled")
	}
	if !errors.Is(lockA.Context().Err(), fencelock.ErrLost) {
		t.Fatalf("old holder's context: %v", lockA.Context().Err())
	}
	if lockB.Token() <= lockA.Token() {
		t.Fatalf("new token %d not above %d", lockB.Token(), lockA.Token())
	}

	// The new holder writes; the old one's writes are refused.
	if err := store.Check(name, lockB.Token()); err != nil {
		t.Fatal(err)
	}
	if err := store.Check(name, lockA.Token()); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write to the fenced store: %v", err)
	}
	resp, err := cli.Txn(ctx).If(ba.Guard(lockA)).Then(clientv3.OpPut("/data/"+name, "from A")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("guarded write by the old holder: succeeded=%v, %v", resp != nil && resp.Succeeded, err)
	}
	resp, err = cli.Txn(ctx).If(bb.Guard(lockB)).Then(clientv3.OpPut("/data/"+name, "from B")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("guarded write by the holder: %v", err)
	}
}

// A lock named "a" and one named "a/1" are separate locks.
func TestNamesAreEscaped(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd)
	c := newLocker(t, b)
	l1, err := c.TryObtain(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Release(ctx)
	l2, err := c.TryObtain(ctx, "a/1")
	if err != nil {
		t.Fatalf("a/1 while a is held: %v", err)
	}
	defer l2.Release(ctx)
	if info, err := c.Inspect(ctx, "a"); err != nil || info.Owner != l1.Owner() {
		t.Fatalf("a: %+v %v", info, err)
	}
}

// On a 3-member cluster a lock survives the loss of the leader, and stays exclusive.
func TestLeaderLossWhileHeld(t *testing.T) {
	ctx := bounded(t, 120*time.Second)
	cluster := etcdtest.Start(t, etcdtest.Options{Members: 3})
	b, _ := newBackend(t, cluster)
	c := newLocker(t, b)
	name := "leader-loss"
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	leader, err := cluster.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	next, err := cluster.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatal("the killed member still leads")
	}
	time.Sleep(6 * time.Second) // more than the TTL: renewals must have reached the new leader
	if err := lock.Context().Err(); err != nil {
		t.Fatalf("lock lost across the leader change: %v", err)
	}
	var others []string
	for _, m := range cluster.Members {
		if m.Running() {
			others = append(others, m.Endpoint)
		}
	}
	ob := etcdbackend.New(cluster.ClientOf(t, others...))
	defer ob.Close()
	other := newLocker(t, ob)
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client got the lock after the leader change: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= lock.Token() {
		t.Fatalf("token %d after %d", l.Token(), lock.Token())
	}
	_ = l.Release(ctx)
}

// Bad input gets a typed error.
func TestBadInput(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	nilBackend := fencelock.New(etcdbackend.New(nil))
	defer nilBackend.Close()
	if _, err := nilBackend.TryObtain(ctx, "x"); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("nil client: %v", err)
	}
	b, cli := newBackend(t, etcd)
	c := newLocker(t, b)
	if _, err := c.TryObtain(ctx, ""); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
	// A key under the lock's prefix that fencelock did not write.
	if _, err := cli.Put(ctx, b.Key("foreign", "someone"), "not a lock"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inspect(ctx, "foreign"); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("foreign key: %v", err)
	}
	// An unreachable cluster.
	dead, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	db := etcdbackend.New(dead)
	defer db.Close()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = fencelock.New(db).TryObtain(short, "x")
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("unreachable cluster: %v", err)
	}
}

// A lock obtained long after its lease was granted is trusted for as long as the lease's last
// keep-alive vouches, not for what was left of the first grant.
func TestValidityAfterIdleLease(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd)
	c := newLocker(t, b)
	first, err := c.Obtain(ctx, "idle-lease")
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Release(ctx)
	time.Sleep(3 * time.Second) // longer than the 2s lease: only keep-alives keep it
	lock, err := c.Obtain(ctx, "idle-lease")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	if left := time.Until(lock.ValidUntil()); left < time.Second {
		t.Fatalf("a fresh lock on a kept-alive lease is trusted for %v only", left)
	}
	if err := lock.Valid(); err != nil {
		t.Fatal(err)
	}
}

func TestListAndForceRelease(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd)
	c := newLocker(t, b)
	var held []*fencelock.Lock
	for _, name := range []string{"list/a", "list/b", "list%c", "other"} {
		l, err := c.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	infos, err := fencelock.List(ctx, b, "list")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, i := range infos {
		got[i.Name] = true
	}
	if len(got) != 3 || !got["list/a"] || !got["list/b"] || !got["list%c"] {
		t.Fatalf("List(list) = %v", infos)
	}
	info, err := b.ForceRelease(ctx, "list/a")
	if err != nil || !info.Held || info.Token != held[0].Token() {
		t.Fatalf("force release: %+v %v", info, err)
	}
	select {
	case <-held[0].Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder of a force-released lock was not told")
	}
	for _, l := range held[1:] {
		_ = l.Release(ctx)
	}
}

// A closed Backend lists nothing and says why, as its every other call does. Before, Names
// and SemaphoreNames went on reading etcd through the caller's client.
func TestNamesAfterClose(t *testing.T) {
	ctx := bounded(t, 10*time.Second)
	b, _ := newBackend(t, etcd)
	if _, err := b.Names(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for what, names := range map[string]func(context.Context, string) ([]string, error){"Names": b.Names, "SemaphoreNames": b.SemaphoreNames} {
		if got, err := names(ctx, ""); !errors.Is(err, fencelock.ErrClosed) {
			t.Errorf("%s after Close: %v, %v; want ErrClosed", what, got, err)
		}
	}
}

// A waiter whose own lease dies while it waits stops with an error instead of waiting forever.
func TestWaiterLeaseDies(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, _ := newBackend(t, etcd)
	holder := newLocker(t, hb)
	lock, err := holder.Obtain(ctx, "waiter-lease")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	wb, cli := newBackend(t, etcd)
	got := make(chan error, 1)
	go func() {
		_, err := wb.AcquireQueued(ctx, driver.Request{Name: "waiter-lease", Owner: "waiter", TTL: 2 * time.Second})
		got <- err
	}()
	testserver.WaitFor(t, 10*time.Second, "the waiter's key in line behind the holder's", func() bool {
		resp, err := cli.Get(ctx, wb.Key("waiter-lease", ""), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	for _, id := range wb.Leases() {
		if _, err := cli.Revoke(ctx, id); err != nil { // as an operator, or expiry, would
			t.Fatal(err)
		}
	}
	select {
	case err := <-got:
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("waiter whose lease died: %v, want ErrUnavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter kept waiting after its lease died")
	}
}
