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

// slack is how long after its context's deadline a call may return.
const slack = 300 * time.Millisecond

// A waiter whose context ends while etcd cannot be reached returns by its deadline, leaving
// its key's deletion to the Backend, which makes it once etcd answers again. The waiter used
// to wait up to 2s more for the deletion.
func TestQueuedWaitReturnsByDeadline(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	const name = "wait-deadline"
	hb, cli, proxy, wb := heldBehindProxy(ctx, t, name)

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := wb.AcquireQueued(short, driver.Request{Name: name, Owner: "waiter", TTL: 2 * time.Second})
		done <- err
	}()
	waitKeys(t, cli, hb, name, 2)
	proxy.Blackhole()
	err := <-done
	deadline, _ := short.Deadline()
	if late := time.Since(deadline); late > slack {
		t.Fatalf("AcquireQueued returned %v after its deadline (%v)", late.Round(time.Millisecond), err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireQueued past its deadline: %v", err)
	}
	proxy.Restore()
	waitKeys(t, cli, hb, name, 1) // the waiter's key is gone: deleted, or its lease ran out
}

// Close over a cut link revokes its leases together, and says in one line that it could not:
// it used to revoke them one after the other, each with its own 2s, and join the errors on
// separate lines.
func TestCloseOverCutLink(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	proxy := testserver.StartProxy(t, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	b := etcdbackend.New(etcd.ClientOf(t, "http://"+proxy.Addr))
	t.Cleanup(func() { _ = b.Close() })
	for _, ttl := range []time.Duration{2 * time.Second, 3 * time.Second, 4 * time.Second} { // a lease each
		if _, err := b.Acquire(ctx, driver.Request{Name: "close-cut-" + ttl.String(), Owner: "o", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Cut()
	began := time.Now()
	err := b.Close()
	took := time.Since(began)
	if !errors.Is(err, fencelock.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Close over a cut link: %q, want one line matching ErrUnavailable", err)
	}
	if took > 2*time.Second+slack {
		t.Fatalf("Close over a cut link took %v: one revoke timeout per lease", took.Round(time.Millisecond))
	}
}

// An acquisition whose reply was lost (the link went silent after etcd applied its put) leaves
// no key in line: the Backend owes the release of its hold and makes it once etcd answers. It
// used to leave the key on the lease it keeps alive, a place in line kept for no one until the
// Backend closed, unless its caller undid the acquisition.
func TestLostEnqueueReplyLeavesNoKey(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	const name = "lost-enqueue-reply"
	hb, cli, proxy, wb := heldBehindProxy(ctx, t, name)
	// The lease of this TTL is granted before the link slows down, and outlives the silence
	// below: its keep-alives resume after it.
	ttl := 5 * time.Second
	if _, err := wb.Acquire(ctx, driver.Request{Name: name + "-lease", Owner: "o", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(300 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := wb.AcquireQueued(short, driver.Request{Name: name, Owner: "waiter", Hold: "h1", TTL: ttl})
		done <- err
	}()
	waitKeys(t, cli, hb, name, 2) // etcd applied the put; its reply is 300 ms away
	proxy.Blackhole()
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireQueued with its reply lost: %v, want the deadline's error", err)
	}
	proxy.SetDelay(0)
	proxy.Restore()
	waitKeys(t, cli, hb, name, 1)
}

// heldBehindProxy holds the lock name through a Backend of its own, and returns that Backend
// and its client, and a second Backend whose link to etcd goes through proxy, for a waiter.
func heldBehindProxy(ctx context.Context, t *testing.T, name string) (hb *etcdbackend.Backend, cli *clientv3.Client, proxy *testserver.Proxy, wb *etcdbackend.Backend) {
	t.Helper()
	hb, cli = newBackend(t, etcd)
	lock, err := newLocker(t, hb).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	proxy = testserver.StartProxy(t, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	wb = etcdbackend.New(etcd.ClientOf(t, "http://"+proxy.Addr))
	t.Cleanup(func() { _ = wb.Close() })
	t.Cleanup(proxy.Restore)
	return hb, cli, proxy, wb
}
