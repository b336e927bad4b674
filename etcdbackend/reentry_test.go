package etcdbackend_test

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/internal/testserver"
)

// A reentrant acquisition with a longer TTL leaves the key on the lease of the first one, so
// the lock is trusted only as long as that lease lives. It used to be trusted for the longer
// TTL: a holder cut off from etcd believed in its lock for 8s after a waiter had taken it.
func TestReentryWithLongerTTLTrustsKeysLease(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	proxy := testserver.StartProxy(t, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	hb := etcdbackend.New(etcd.ClientOf(t, "http://"+proxy.Addr))
	t.Cleanup(func() { _ = hb.Close() })
	holder := newLocker(t, hb)
	t.Cleanup(proxy.Restore) // before the Backend closes: it revokes its leases
	const name = "reentry-longer-ttl"
	first, err := holder.Obtain(ctx, name, fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	again, err := holder.Obtain(first.Context(), name, fencelock.WithTTL(10*time.Second))
	if err != nil || again.HoldCount() != 2 {
		t.Fatalf("re-entry: count %d, %v", again.HoldCount(), err)
	}

	wb, cli := newBackend(t, etcd)
	type obtained struct {
		l  *fencelock.Lock
		at time.Time
	}
	got := make(chan obtained, 1)
	go func() {
		l, err := newLocker(t, wb).Obtain(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- obtained{l, time.Now()}
	}()
	waitKeys(t, cli, wb, name, 2)
	proxy.Blackhole() // the holder's keep-alives stop reaching etcd: its 2s lease runs out
	var w obtained
	select {
	case w = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the lock after the holder's lease ran out")
	}
	if w.l == nil {
		t.FailNow()
	}
	defer w.l.Release(ctx)
	for _, l := range []*fencelock.Lock{first, again} {
		if until := l.ValidUntil(); until.After(w.at) {
			t.Fatalf("a waiter got the lock while the holder's hold %d was trusted %v longer", l.HoldCount(), until.Sub(w.at).Round(time.Millisecond))
		}
	}
}

// WithOwner in two processes: the second one's hold is in the first one's key, on the first
// one's lease. Its renewal used to look for that lease among its own Backend's only, and
// declared the lock lost while etcd held it with both holds.
func TestReentryThroughAnotherBackend(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	ba, cli := newBackend(t, etcd)
	bb, _ := newBackend(t, etcd)
	const name, owner = "reentry-other-backend", "shared-owner"
	la, err := newLocker(t, ba).Obtain(ctx, name, fencelock.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := newLocker(t, bb).Obtain(ctx, name, fencelock.WithOwner(owner))
	if err != nil || lb.HoldCount() != 2 || lb.Token() != la.Token() {
		t.Fatalf("re-entry through another Backend: count %d, token %d (want %d), %v", lb.HoldCount(), lb.Token(), la.Token(), err)
	}
	if err := lb.Refresh(ctx, 0); err != nil {
		t.Fatalf("renewing the hold taken through another Backend: %v", err)
	}
	time.Sleep(3 * time.Second) // longer than the TTL: the watchdog keeps renewing
	if err := lb.Valid(); err != nil {
		t.Fatalf("the hold taken through another Backend, after 3s: %v", err)
	}

	// It never claims more than the lease it is on: once the first Backend stops keeping that
	// lease alive, the hold is no longer trusted by the time etcd deletes the key.
	ba.StopKeepAlive()
	key := ba.Key(name, owner)
	for {
		resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	gone := time.Now()
	for _, l := range []*fencelock.Lock{la, lb} {
		if until := l.ValidUntil(); until.After(gone) {
			t.Fatalf("etcd deleted the key while hold %d was trusted %v longer", l.HoldCount(), until.Sub(gone).Round(time.Millisecond))
		}
	}
}

// A fresh owner's first hold in line sends no Else branch, expecting no key of its owner;
// when one is there, it reads it and goes on as the Else branch would have: the retry of an
// acquisition whose reply was lost takes its hold back, and a key another hold of the owner
// made is joined.
func TestFreshHoldFindsItsOwnersKey(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd)
	const name = "fresh-hold-finds-key"
	req := driver.Request{Name: name, Owner: "retried-owner", TTL: 5 * time.Second}
	first, err := b.AcquireQueued(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.AcquireQueued(ctx, req)
	if err != nil || again.Token != first.Token || again.Count != 1 {
		t.Fatalf("the retry of a fresh hold: token %d (want %d), count %d (want 1), %v", again.Token, first.Token, again.Count, err)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: name, Owner: req.Owner, Token: first.Token}, ""); err != nil {
		t.Fatal(err)
	}

	other := driver.Request{Name: name, Owner: "joined-owner", Hold: "h1", TTL: 5 * time.Second}
	made, err := b.AcquireQueued(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	other.Hold = ""
	joined, err := b.AcquireQueued(ctx, other)
	if err != nil || joined.Token != made.Token || joined.Count != 2 {
		t.Fatalf("a fresh hold on its owner's key: token %d (want %d), count %d (want 2), %v", joined.Token, made.Token, joined.Count, err)
	}
	for _, hold := range []string{"", "h1"} {
		if _, err := b.Release(ctx, driver.Lease{Name: name, Owner: other.Owner, Token: made.Token}, hold); err != nil {
			t.Fatalf("releasing hold %q: %v", hold, err)
		}
	}
	if info, err := b.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("after both holds were released: %+v, %v", info, err)
	}
}
