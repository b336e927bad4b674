package zkbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// longSession outlasts the outages of these tests: go-zookeeper redials a lone server only
// once a second, and the session must survive the cut for the node to stay.
const longSession = zktest.MaxSessionTimeout

// A release made while the connection is down cannot reach the server, and the session
// survives the outage: the node would stay at the head of the line, holding the lock for no
// one as long as the process lives. The Backend owes the release and makes it once the
// session is back. It used to give up after its tries, and every other client was refused
// the lock from then on.
func TestReleaseDuringDisconnectIsOwed(t *testing.T) {
	var link zktest.Link
	conn := dialSession(t, server.Addr, link.Dial, longSession)
	b := zkbackend.New(conn, zkbackend.WithSessionTimeout(longSession))
	c := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(longSession)))
	t.Cleanup(func() { _ = c.Close() })
	other, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)

	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	session := conn.SessionID()
	link.Cut()
	waitFor(t, 5*time.Second, "the disconnect", func() bool { return conn.State() != zk.StateHasSession })
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = lock.Release(short)
	cancel()
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a release over a cut link: %v, want ErrUnavailable", err)
	}
	if q := line(t, admin, b.Path(name)); len(q) != 1 {
		t.Fatalf("line %v: the release reached the server after all", q)
	}
	link.Restore()
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return conn.State() == zk.StateHasSession })
	if conn.SessionID() != session {
		t.Fatal("the session expired during the outage: nothing left to show")
	}
	restored := time.Now()
	for {
		l, err := other.TryObtain(ctx, name)
		if err == nil {
			t.Logf("another client holds the lock %v after the reconnect", time.Since(restored).Round(time.Millisecond))
			_ = l.Release(ctx)
			break
		}
		if !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatal(err)
		}
		if time.Since(restored) > 10*time.Second {
			t.Fatalf("10s after the reconnect, with the same session, the released lock is still held: line %v", line(t, admin, b.Path(name)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A create whose reply was lost, then an outage: the Backend owes the removal of the node the
// create may have made. The retry of the same acquisition takes that node back (the Client
// retries with the same owner and hold); what was owed of it must then never run. It used to
// run at the Backend's next call, for any lock, and delete the node under its holder: another
// client got the lock while the holder trusted it for a whole session timeout more.
func TestOwedRemovalSparesAdoptedNode(t *testing.T) {
	var link zktest.Link
	conn := dialSession(t, server.Addr, link.Dial, longSession)
	b := zkbackend.New(conn, zkbackend.WithSessionTimeout(longSession))
	t.Cleanup(func() { _ = b.Close() })
	other, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	dir := b.Path(name)
	req := driver.Request{Name: name, Owner: "owner", TTL: longSession}
	// With the root missing the lost create would fail on the server, and leave nothing.
	if _, err := admin.Create("/fencelock", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		t.Fatal(err)
	}
	session := conn.SessionID()

	guid := zkbackend.NewGUID()
	link.LoseReply([]byte(guid))
	first := make(chan error, 1)
	go func() {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := b.AcquireGUID(short, req, guid)
		first <- err
	}()
	waitFor(t, 5*time.Second, "the lost create's node", func() bool { return len(line(t, admin, dir)) == 1 })
	link.Cut() // before go-zookeeper redials: the attempt cannot look for its node
	if err := <-first; err == nil {
		t.Fatal("an acquisition over a cut link succeeded")
	}
	q := line(t, admin, dir)
	_, stat, err := admin.Exists(dir + "/" + q[0])
	if err != nil {
		t.Fatal(err)
	}
	made := stat.Czxid

	retry := make(chan error, 1)
	var g driver.Grant
	go func() {
		var err error
		g, err = b.AcquireQueued(ctx, req)
		retry <- err
	}()
	time.Sleep(1500 * time.Millisecond) // the retry starts during the outage
	link.Restore()
	if err := <-retry; err != nil {
		t.Fatal(err)
	}
	if conn.SessionID() != session {
		t.Fatal("the session expired during the outage: nothing left to show")
	}
	if g.Token != made {
		t.Fatalf("the retry got token %d, not the node the lost create made (%d)", g.Token, made)
	}
	taken := time.Now()

	// The Backend's next call, on another lock, gives owed work its chance.
	side := driver.Request{Name: name + "-side", Owner: "owner", TTL: longSession}
	if _, err := b.Acquire(ctx, side); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: side.Name, Owner: side.Owner}, ""); err != nil {
		t.Fatal(err)
	}
	for time.Since(taken) < 2*time.Second {
		if l, err := other.TryObtain(ctx, name); err == nil {
			t.Fatalf("another client holds the lock (token %d) %v after the retry was granted token %d for %v", l.Token(), time.Since(taken).Round(time.Millisecond), g.Token, g.Validity)
		} else if !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := b.Release(ctx, driver.Lease{Name: name, Owner: req.Owner}, ""); n != 0 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}
}

// Close waits for the releases it owes: once it returns after the connection is back, the
// node is gone. Over a link that stays cut it gives up after its bound.
func TestCloseWaitsForOwedRelease(t *testing.T) {
	var link zktest.Link
	conn := dialSession(t, server.Addr, link.Dial, longSession)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	req := driver.Request{Name: name, Owner: "owner", Hold: "h", TTL: longSession}
	lease := driver.Lease{Name: name, Owner: "owner", TTL: longSession}

	b := zkbackend.New(conn, zkbackend.WithSessionTimeout(longSession))
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	link.Cut()
	waitFor(t, 5*time.Second, "the disconnect", func() bool { return conn.State() != zk.StateHasSession })
	if _, err := b.Release(ctx, lease, "h"); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a release over a cut link: %v", err)
	}
	link.Restore()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if q := line(t, admin, b.Path(name)); len(q) != 0 {
		t.Fatalf("Close returned with the owed release not made: line %v", q)
	}
	if _, err := b.Acquire(ctx, req); !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}

	// Over a link that stays cut, Close gives up after its bound.
	b2 := zkbackend.New(conn, zkbackend.WithSessionTimeout(longSession))
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return conn.State() == zk.StateHasSession })
	if _, err := b2.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	link.Cut()
	t.Cleanup(link.Restore)
	if _, err := b2.Release(ctx, lease, "h"); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a release over a cut link: %v", err)
	}
	began := time.Now()
	err := b2.Close()
	if took := time.Since(began); took > zkbackend.CloseTimeout+slack {
		t.Fatalf("Close over a cut link took %v", took.Round(time.Millisecond))
	}
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Close with a release it could not make: %v, want ErrUnavailable", err)
	}
}
