package zkbackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// Every call of an unusable Backend fails with ErrInvalid, and says why; nothing panics.
func TestUnusableBackend(t *testing.T) {
	conn := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, tc := range []struct {
		what string
		b    *zkbackend.Backend
	}{
		{"nil conn", zkbackend.New(nil, zkbackend.WithSessionTimeout(time.Second))},
		{"no session timeout", zkbackend.New(conn)},
		{"relative root", newBackend(conn, zkbackend.WithRoot("locks"))},
		{"trailing slash", newBackend(conn, zkbackend.WithRoot("/locks/"))},
		{"reserved root", newBackend(conn, zkbackend.WithRoot("/zookeeper/locks"))},
		{"empty ACL", newBackend(conn, zkbackend.WithACL(nil))},
		{"nil backend", nil},
	} {
		req := driver.Request{Name: "n", Owner: "o", TTL: time.Second}
		lease := driver.Lease{Name: "n", Owner: "o", TTL: time.Second}
		_, err1 := tc.b.Acquire(ctx, req)
		_, err2 := tc.b.AcquireQueued(ctx, req)
		_, err3 := tc.b.Release(ctx, lease, "")
		_, err4 := tc.b.Inspect(ctx, "n")
		r := tc.b.Renew(ctx, []driver.Lease{lease})
		for _, err := range []error{err1, err2, err3, err4, r[0].Err} {
			if !errors.Is(err, fencelock.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", tc.what, err)
			}
		}
		if tc.what != "nil backend" {
			_, err := fencelock.New(tc.b).TryObtain(ctx, "n")
			if !errors.Is(err, fencelock.ErrInvalid) {
				t.Errorf("%s through a Client: %v", tc.what, err)
			}
		}
	}
}

// A name is one path element: nesting one lock inside another is refused, so a lock /a never
// sees the nodes of /a/1 as its waiters (go-zookeeper's zk.Lock does).
func TestNamesDoNotNest(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, name := range []string{"a/1", "/a", ".", "..", "bell\a", "nul\x00"} {
		if _, err := c.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("TryObtain(%q): %v, want ErrInvalid", name, err)
		}
	}
}

// Children of a lock's directory that the backend did not name are not contenders.
func TestForeignChildrenIgnored(t *testing.T) {
	c, b := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	name := lockName(t)
	dir := b.Path(name)
	for _, p := range []string{"/fencelock", dir, dir + "/lock-0000000000", dir + "/1"} {
		if _, err := admin.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = admin.Delete(dir+"/lock-0000000000", -1)
		_ = admin.Delete(dir+"/1", -1)
		_ = admin.Delete(dir, -1)
	})
	if info, err := c.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("foreign nodes read as a holder: %+v %v", info, err)
	}
	lock, err := c.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, admin, dir+"/1") {
		t.Fatal("a foreign node was removed")
	}
}

// Whatever way a node leaves the line (a failed TryObtain, a waiter that gives up, the last
// release), the name leaves nothing behind once no one holds or wants it.
func TestNoDirectoryLeftBehind(t *testing.T) {
	holder, b := newClient(t)
	other, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := lockName(t)
	dir := b.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := holder.Obtain(lock.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("TryObtain of a held lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = other.Obtain(short, name)
	cancel()
	if !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("Obtain with a short context: %v", err)
	}
	if q := line(t, admin, dir); len(q) != 1 {
		t.Fatalf("line after the others gave up: %v", q)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, admin, dir) {
		t.Fatal("an inner release removed the directory")
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, admin, dir) {
		t.Fatalf("%s left behind after the last release", dir)
	}
}

// The backend's own contract, below the Client: a retried acquire does not count twice, a
// retried release does not decrement twice, also when another Backend (with no copy of the
// node) makes the retry.
func TestHoldsCountOnce(t *testing.T) {
	conn := dial(t, server.Addr, nil)
	b, fresh := newBackend(conn), newBackend(conn)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	name := lockName(t)
	req := func(hold string) driver.Request {
		return driver.Request{Name: name, Owner: "owner", Hold: hold, TTL: sessionTimeout}
	}
	lease := driver.Lease{Name: name, Owner: "owner", TTL: sessionTimeout}
	count := func(g driver.Grant, err error) int {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return g.Count
	}
	first, err := b.Acquire(ctx, req("h1"))
	if err != nil || first.Count != 1 || first.Validity != sessionTimeout {
		t.Fatalf("first acquire: %+v %v", first, err)
	}
	_, stat, err := admin.Get(b.Path(name) + "/" + line(t, admin, b.Path(name))[0])
	if err != nil || stat.Czxid != first.Token {
		t.Fatalf("token %d, czxid %d (%v)", first.Token, stat.Czxid, err)
	}
	if n := count(b.Acquire(ctx, req("h1"))); n != 1 {
		t.Fatalf("retried acquire counted: %d", n)
	}
	if n := count(fresh.Acquire(ctx, req("h1"))); n != 1 {
		t.Fatalf("retried acquire through another Backend counted: %d", n)
	}
	g, err := fresh.AcquireQueued(ctx, req("h2"))
	if err != nil || g.Count != 2 || g.Token != first.Token {
		t.Fatalf("reentrant acquire: %+v %v", g, err)
	}
	for _, rel := range []struct {
		b    *zkbackend.Backend
		hold string
		want int
	}{{b, "h2", 1}, {b, "h2", 1}, {fresh, "h2", 1}, {fresh, "h1", 0}} {
		if n, err := rel.b.Release(ctx, lease, rel.hold); n != rel.want || err != nil {
			t.Fatalf("release %s: %d %v, want %d", rel.hold, n, err, rel.want)
		}
	}
	if _, err := b.Release(ctx, lease, "h1"); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("release of a free lock: %v", err)
	}
	if r := b.Renew(ctx, []driver.Lease{lease}); !errors.Is(r[0].Err, fencelock.ErrNotHeld) {
		t.Fatalf("renew of a free lock: %+v", r[0])
	}
}

// Renew vouches for one session timeout while the node is there, says ErrNotHeld once it is
// gone, and ErrUnavailable while the connection is down (a disconnect is not a loss).
func TestRenew(t *testing.T) {
	var link zktest.Link
	conn := dial(t, server.Addr, link.Dial)
	b := newBackend(conn)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := lockName(t)
	req := driver.Request{Name: name, Owner: "owner", TTL: sessionTimeout}
	lease := driver.Lease{Name: name, Owner: "owner", TTL: sessionTimeout}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if r := b.Renew(ctx, []driver.Lease{lease, {Name: name, Owner: "someone else"}}); r[0].Err != nil || r[0].Validity != sessionTimeout || !errors.Is(r[1].Err, fencelock.ErrNotHeld) {
		t.Fatalf("renewals: %+v", r)
	}

	link.Cut()
	waitFor(t, 5*time.Second, "the disconnect", func() bool { return conn.State() != zk.StateHasSession })
	if r := b.Renew(ctx, []driver.Lease{lease}); !errors.Is(r[0].Err, fencelock.ErrUnavailable) {
		t.Fatalf("renewal while disconnected: %+v", r[0])
	}
	link.Restore()
	waitFor(t, 5*time.Second, "the reconnect", func() bool { return conn.State() == zk.StateHasSession })
	if r := b.Renew(ctx, []driver.Lease{lease}); r[0].Err != nil {
		t.Fatalf("renewal after a short disconnect: %+v", r[0])
	}

	dropHolder(t, admin, b.Path(name))
	if r := b.Renew(ctx, []driver.Lease{lease}); !errors.Is(r[0].Err, fencelock.ErrNotHeld) {
		t.Fatalf("renewal of a dropped lock: %+v", r[0])
	}
}

// Renew checks many leases at once, not one round trip after another: a Client's watchdog
// renews every lock it holds in one call, bounded by its deadline, and a lock whose check the
// deadline cut off is a lock the Client stops trusting. 200 leases behind 50 ms of round trip
// take 10 s one at a time; the call here has 3 s.
func TestRenewChecksLeasesAtOnce(t *testing.T) {
	proxy := testserver.StartProxy(t, server.Addr)
	conn := dial(t, proxy.Addr, nil)
	b := newBackend(conn)
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	leases := make([]driver.Lease, 200)
	for i := range leases {
		leases[i] = driver.Lease{Name: fmt.Sprintf("%s-%d", name, i), Owner: "owner", TTL: sessionTimeout}
		if _, err := b.Acquire(ctx, driver.Request{Name: leases[i].Name, Owner: "owner", TTL: sessionTimeout}); err != nil {
			t.Fatal(err)
		}
	}
	proxy.SetDelay(25 * time.Millisecond)
	renewCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for i, r := range b.Renew(renewCtx, leases) {
		if r.Err != nil || r.Validity != sessionTimeout {
			t.Fatalf("lease %d of %d: %+v", i, len(leases), r)
		}
	}
}

// A renewal checks the node of the lease's token: what the Backend remembers of the owner's
// hold may be another, earlier node of the same owner (one an undo removed while a call of the
// owner's took the next), and that one's absence says nothing of the lease's.
func TestRenewChecksTheLeasesNode(t *testing.T) {
	b := newBackend(dial(t, server.Addr, nil))
	ctx := ctxTimeout(t, 20*time.Second)
	for _, limit := range []int{0, 2} {
		name := fmt.Sprintf("%s-%d", lockName(t), limit)
		req := driver.Request{Name: name, Owner: "owner", TTL: sessionTimeout, Limit: limit}
		first, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		stale, ok := b.Held(name, "owner", limit)
		if !ok {
			t.Fatalf("limit %d: the Backend remembers no hold after the grant", limit)
		}
		if _, err := b.Release(ctx, driver.Lease{Name: name, Owner: "owner", TTL: sessionTimeout, Limit: limit, Token: first.Token}, ""); err != nil {
			t.Fatal(err)
		}
		next, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if next.Token == first.Token {
			t.Fatalf("limit %d: the next grant has the first's token %d", limit, next.Token)
		}
		b.Remember(name, "owner", limit, stale)
		lease := driver.Lease{Name: name, Owner: "owner", TTL: sessionTimeout, Limit: limit, Token: next.Token}
		if r := b.Renew(ctx, []driver.Lease{lease}); r[0].Err != nil {
			t.Fatalf("limit %d: renewal of token %d, the Backend remembering token %d's node: %v", limit, next.Token, first.Token, r[0].Err)
		}
	}
}
