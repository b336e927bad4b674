package zkbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// Holder A is cut off from the server past its session timeout: the server expires the
// session and deletes A's node, the lock passes to waiter B, A's context has ended by then
// (the Client trusts a lock no longer than the server keeps a silent session), and a write
// with A's token is refused once B has written with its own.
func TestSessionExpiryMovesTheLock(t *testing.T) {
	var link zktest.Link
	connA := dial(t, server.Addr, link.Dial)
	backendA := newBackend(connA)
	a := fencelock.New(backendA, fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	t.Cleanup(func() { _ = a.Close() })
	b, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := backendA.Path(name)
	var store fence.Memory

	lockA, err := a.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Check(name, lockA.Token()); err != nil {
		t.Fatal(err)
	}
	obtained := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := b.Obtain(ctx, name)
		if err != nil {
			t.Error(err)
		}
		obtained <- l
	}()
	waitFor(t, 10*time.Second, "B in line", func() bool { return len(line(t, admin, dir)) == 2 })

	oldSession := connA.SessionID()
	cut := time.Now()
	link.Cut()
	lockB := <-obtained
	if lockB == nil {
		t.FailNow()
	}
	t.Logf("B holds %v after the cut", time.Since(cut))
	if err := lockA.Context().Err(); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("B holds the lock while A's context says %v", err)
	}
	if lockB.Token() <= lockA.Token() {
		t.Fatalf("B's token %d is not above A's %d", lockB.Token(), lockA.Token())
	}
	if err := store.Check(name, lockB.Token()); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := store.Check(name, lockA.Token()); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's late write: %v, want fence.ErrStale", err)
	}

	// A reconnects, learns its session expired, and gets a new one: the backend says A's lock
	// is not held, and A's release leaves B's lock alone.
	link.Restore()
	waitFor(t, 10*time.Second, "A's new session", func() bool {
		return connA.State() == zk.StateHasSession && connA.SessionID() != oldSession
	})
	lease := driver.Lease{Name: name, Owner: lockA.Owner(), TTL: sessionTimeout}
	if r := backendA.Renew(ctx, []driver.Lease{lease}); !errors.Is(r[0].Err, fencelock.ErrNotHeld) {
		t.Fatalf("renewal after the expiry: %+v", r[0])
	}
	if err := lockA.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("A's release: %v", err)
	}
	if info, err := b.Inspect(ctx, name); err != nil || info.Token != lockB.Token() {
		t.Fatalf("B's lock after A's release: %+v %v", info, err)
	}
	if err := lockB.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose session expires while it waits returns ErrUnavailable (its node went with the
// session) instead of waiting forever.
func TestWaiterSessionExpiry(t *testing.T) {
	holder, bh := newClient(t)
	var link zktest.Link
	connW := dial(t, server.Addr, link.Dial)
	waiter := newBackend(connW)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := bh.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireQueued(ctx, driver.Request{Name: name, Owner: "waiter", TTL: sessionTimeout})
		waited <- err
	}()
	waitFor(t, 10*time.Second, "the waiter in line", func() bool { return len(line(t, admin, dir)) == 2 })
	waitFor(t, 10*time.Second, "the waiter waiting", func() bool { return watches(t, dir)[dir+"/"+line(t, admin, dir)[0]] == 1 })

	link.Cut()
	waitFor(t, 3*sessionTimeout, "the server to expire the waiter's session", func() bool { return len(line(t, admin, dir)) == 1 })
	link.Restore()
	select {
	case err := <-waited:
		if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, zk.ErrSessionExpired) {
			t.Fatalf("waiter: %v, want ErrUnavailable for the expired session", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter still waits after its session expired")
	}
}

// A paused server is a disconnect, not an expiry: nothing is deleted, but the holder can no
// longer confirm its lock, and its context ends with ErrLost once the validity deadline passes,
// one session timeout after the last confirmation, whether or not the server ever comes back.
func TestPausedServerEndsTheLockByItsDeadline(t *testing.T) {
	srv := zktest.Start(t, zktest.Options{})
	c := fencelock.New(newBackend(dial(t, srv.Addr, nil)), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxTimeout(t, 30*time.Second)

	lock, err := c.Obtain(ctx, lockName(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	defer srv.Resume()
	select {
	case <-lock.Context().Done():
	case <-time.After(sessionTimeout + 2*time.Second):
		t.Fatal("the lock outlived its validity while the server was paused")
	}
	if took := time.Since(paused); took > sessionTimeout+500*time.Millisecond {
		t.Fatalf("the lock ended %v after the pause, later than a session timeout after its last renewal", took)
	}
	if err := lock.Context().Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("context error %v", err)
	}
}

// The user closes the connection of a leader's Backend (not a drop: go-zookeeper tells the
// server, which ends the session and deletes its nodes at once), so another contender leads at
// once. The leadership must end as soon: its context ends with ErrLost, well before its
// deadline. It used to stay valid until then, while the successor led, its renewals taken for
// a disconnect that might pass.
func TestClosedConnectionEndsLeadership(t *testing.T) {
	// A long session, so that the leadership's deadline is far off: only word of the close
	// can end it within the bound.
	const timeout = zktest.MaxSessionTimeout
	conn := dialSession(t, server.Addr, nil, timeout)
	backend := zkbackend.New(conn, zkbackend.WithSessionTimeout(timeout))
	leader := fencelock.New(backend, fencelock.WithDefaults(fencelock.WithTTL(timeout)))
	t.Cleanup(func() {
		_ = leader.Close()
		_ = backend.Close()
	})
	other, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)

	first, err := leader.Election(name).Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *fencelock.Leadership, 1)
	go func() {
		l, err := other.Election(name).Campaign(ctx, "next")
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitFor(t, 10*time.Second, "the next contender in line", func() bool { return len(line(t, admin, backend.Path(name))) == 2 })

	conn.Close()
	select {
	case <-first.Context().Done():
	case <-time.After(timeout / 2):
		t.Fatalf("the leadership is still trusted %v after its connection was closed (valid for %v more)", timeout/2, time.Until(first.Lock().ValidUntil()).Round(time.Millisecond))
	}
	if err := first.Context().Err(); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("the leadership's context after its connection was closed: %v, want ErrLost", err)
	}
	// Its node went with the session: there is nothing to resign, and nothing owed.
	if err := first.Resign(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("Resign once the connection was closed: %v, want ErrNotHeld", err)
	}
	if n := backend.Owed(); n != 0 {
		t.Fatalf("%d removals owed on a closed connection, whose session took its nodes", n)
	}
	second := <-next
	if second == nil {
		t.FailNow()
	}
	if second.Term() <= first.Term() {
		t.Fatalf("the next leader's term %d is not above %d", second.Term(), first.Term())
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A dropped connection is no loss, unlike a closed one: go-zookeeper reconnects within the
// session, and the lock, and the watch that tells of the session's end, survive the drop. A
// close after it still ends the lock at once.
func TestDroppedConnectionIsNoLoss(t *testing.T) {
	var link zktest.Link
	conn := dialSession(t, server.Addr, link.Dial, longSession)
	backend := zkbackend.New(conn, zkbackend.WithSessionTimeout(longSession))
	c := fencelock.New(backend, fencelock.WithDefaults(fencelock.WithTTL(longSession)))
	t.Cleanup(func() {
		_ = c.Close()
		_ = backend.Close()
	})
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)

	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	session := conn.SessionID()
	link.Cut()
	waitFor(t, 5*time.Second, "the disconnect", func() bool { return conn.State() != zk.StateHasSession })
	link.Restore()
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return conn.State() == zk.StateHasSession })
	if conn.SessionID() != session {
		t.Fatal("the session expired during the outage: nothing left to show")
	}
	if err := lock.Valid(); err != nil {
		t.Fatalf("the lock after a drop its session survived: %v", err)
	}
	if err := lock.Refresh(ctx, longSession); err != nil {
		t.Fatalf("a renewal after a drop its session survived: %v", err)
	}

	conn.Close()
	select {
	case <-lock.Context().Done():
	case <-time.After(longSession / 2):
		t.Fatalf("the lock is still trusted %v after its connection was closed", longSession/2)
	}
	if err := lock.Context().Err(); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("the lock's context after its connection was closed: %v, want ErrLost", err)
	}
}
