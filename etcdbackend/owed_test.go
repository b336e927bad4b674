package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/internal/testserver"
)

// A release whose outcome the client never learned is retried by the Backend: the key sits on
// a lease the Backend keeps alive, and would otherwise hold the lock for no one until the
// Backend closed (found by the safety suite under a leader restart).
func TestUnconfirmedReleaseIsRetried(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	proxy := testserver.StartProxy(t, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	b := etcdbackend.New(etcd.ClientOf(t, "http://"+proxy.Addr))
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b)
	t.Cleanup(func() { _ = c.Close() })
	observer, _ := newBackend(t, etcd)

	const name = "owed-release"
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = lock.Release(short)
	cancel()
	if err == nil || errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("a release over a cut link: %v", err)
	}
	if info, err := observer.Inspect(ctx, name); err != nil || !info.Held {
		t.Fatalf("the failed release reached etcd after all: %+v %v", info, err)
	}
	proxy.Restore()
	// The Backend's lease lives on (its keep-alive runs); the lock must not.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := observer.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held 10s after its release failed: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A create whose reply was lost, then a cleanup that failed: the Backend owes the key's
// release. The retry of the same acquisition takes the key back, and the owed release must
// then never run: it used to delete the key at the next keep-alive, under its live holder.
func TestOwedReleaseSparesAdoptedKey(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, f := newFaultyBackend(t, etcd)
	_, cli := newBackend(t, etcd)
	const name = "owed-adopted"
	req := driver.Request{Name: name, Owner: "owner-adopted", TTL: 2 * time.Second}
	lease := driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL}

	f.others(fail)     // the settler stays off until the retry has taken the key back
	f.plan(lose, fail) // the create's reply is lost; the cleanup never reaches etcd
	if _, err := b.AcquireQueued(planned(ctx), req); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a create whose reply was lost: %v", err)
	}
	if _, err := b.Release(planned(ctx), lease, req.Hold); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a cleanup that never reached etcd: %v", err)
	}
	adoptedStays(t, b, f, cli, req)
}

// The same for a waiter whose read failed, whose leaving the line failed, and whose cleanup
// failed: it reaches the head, and its retry takes the key back. The owed leave used to
// delete it.
func TestOwedLeaveSparesAdoptedKey(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	const name = "owed-leave-adopted"
	hreq := driver.Request{Name: name, Owner: "holder", TTL: 2 * time.Second}
	if _, err := hb.Acquire(ctx, hreq); err != nil {
		t.Fatal(err)
	}
	between := secondAhead(t, ctx, hb, cli, name)
	b, f := newFaultyBackend(t, etcd)
	req := driver.Request{Name: name, Owner: "waiter-adopted", TTL: 2 * time.Second}
	lease := driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL}

	f.others(fail)
	f.plan(pass, fail, fail) // joins the line; its read fails, and so does its leaving
	if _, err := b.AcquireQueued(planned(ctx), req); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a waiter whose read failed: %v", err)
	}
	f.plan(fail)
	if _, err := b.Release(planned(ctx), lease, req.Hold); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a cleanup that never reached etcd: %v", err)
	}
	if _, err := hb.Release(ctx, driver.Lease{Name: name, Owner: hreq.Owner, TTL: hreq.TTL}, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-between; err != nil {
		t.Fatal(err)
	}
	adoptedStays(t, b, f, cli, req)
}

// secondAhead queues a waiter behind the holder of name, which takes the lock when the holder
// releases it and releases it at once, and has waiters watch one key ahead at a time: a waiter
// that joins after it has more keys ahead than it watches, and reads the line after joining.
func secondAhead(t *testing.T, ctx context.Context, hb *etcdbackend.Backend, cli *clientv3.Client, name string) <-chan error {
	etcdbackend.WatchAllUpTo(t, 1)
	done := make(chan error, 1)
	go func() {
		done <- acquireAndRelease(ctx, hb, driver.Request{Name: name, Owner: "between", TTL: 2 * time.Second})
	}()
	waitKeys(t, cli, hb, name, 2)
	return done
}

// adoptedStays retries req, which must take back the key an earlier attempt left, lets the
// settler run, and checks that the key stays while its holder holds it: through several
// keep-alives, with another owner kept out.
func adoptedStays(t *testing.T, b *etcdbackend.Backend, f *faults, cli *clientv3.Client, req driver.Request) {
	t.Helper()
	ctx := bounded(t, 20*time.Second)
	key := b.Key(req.Name, req.Owner)
	left, err := cli.Get(ctx, key)
	if err != nil || len(left.Kvs) != 1 {
		t.Fatalf("the failed attempt left no key: %v", err)
	}
	created := left.Kvs[0].CreateRevision
	g, err := b.AcquireQueued(planned(ctx), req)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != created {
		t.Fatalf("the retry got token %d, not the key the failed attempt made at %d", g.Token, created)
	}
	taken := time.Now()
	f.others(pass)
	other, _ := newBackend(t, etcd)
	for time.Since(taken) < 3*time.Second { // the lease is 2s: a keep-alive every 667ms
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != created {
			t.Fatalf("the key the retry took back was deleted %v later, under its holder", time.Since(taken).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err = other.Acquire(ctx, driver.Request{Name: req.Name, Owner: "other", TTL: 2 * time.Second})
	if held := (*fencelock.HeldError)(nil); !errors.As(err, &held) {
		t.Fatalf("another owner's attempt on the held lock: %v", err)
	}
}

// The same, when the retry comes with a hold of its own (an owner given with WithOwner, or a
// reentrant context): it joins the key the failed waiter left, and the owed leave must take
// out the failed waiter's hold alone. It used to delete the key with the new hold in it.
func TestOwedLeaveSparesReenteredKey(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	const name = "owed-leave-reentered"
	hreq := driver.Request{Name: name, Owner: "holder", TTL: 2 * time.Second}
	if _, err := hb.Acquire(ctx, hreq); err != nil {
		t.Fatal(err)
	}
	between := secondAhead(t, ctx, hb, cli, name)
	b, f := newFaultyBackend(t, etcd)
	req := driver.Request{Name: name, Owner: "waiter-reentered", Hold: "h1", TTL: 2 * time.Second}
	f.others(fail)           // the settler stays off until the retry has joined the key
	f.plan(pass, fail, fail) // joins the line; its read fails, and so does its leaving
	if _, err := b.AcquireQueued(planned(ctx), req); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a waiter whose read failed: %v", err)
	}
	if _, err := hb.Release(ctx, driver.Lease{Name: name, Owner: hreq.Owner, TTL: hreq.TTL}, ""); err != nil {
		t.Fatal(err)
	}
	req.Hold = "h2"
	g, err := b.AcquireQueued(planned(ctx), req)
	if err != nil || g.Count != 2 {
		t.Fatalf("the retry with hold h2: %+v %v", g, err)
	}
	if err := <-between; err != nil {
		t.Fatal(err)
	}
	f.others(pass)
	// The settler takes h1 out; h2 keeps the key, with the token it was granted.
	key := b.Key(name, req.Owner)
	deadline := time.Now().Add(3 * time.Second) // keep-alives of the 2s lease: the settler runs at each
	for time.Now().Before(deadline) {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != g.Token {
			t.Fatalf("the key of the granted hold h2 was deleted under its holder")
		}
		if v := string(resp.Kvs[0].Value); v != "2\nh1\nh2" && v != "1\nh2" {
			t.Fatalf("the key of the granted hold h2 holds %q", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	observer, _ := newBackend(t, etcd)
	waitCount(t, observer, name, 1) // h1 is gone
}

// What is owed is retried when no keep-alive runs: a Backend whose leases all ended (their
// keep-alives unconfirmed for a whole TTL) used to keep a release owed, unretried, until an
// acquisition took a new lease, and a call that waited for its clean-up waited as long.
func TestOwedIsRetriedWithoutKeepAlive(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, f := newFaultyBackend(t, etcd)
	const name = "owed-no-keepalive"
	lease := driver.Lease{Name: name, Owner: "owner", TTL: 2 * time.Second}
	if _, err := b.Acquire(ctx, driver.Request{Name: name, Owner: lease.Owner, TTL: lease.TTL}); err != nil {
		t.Fatal(err)
	}
	f.others(fail) // the settler's tries fail
	f.plan(fail)
	if _, err := b.Release(planned(ctx), lease, ""); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a release that never reached etcd: %v", err)
	}
	b.StopKeepAlive()
	f.others(pass)
	deadline := time.Now().Add(10 * time.Second)
	for b.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("10s after etcd answers again, the Backend still has %d clean-ups to finish", b.Pending())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
