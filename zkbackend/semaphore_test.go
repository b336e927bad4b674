package zkbackend_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/zkbackend"
)

// A permit holder paused past its session timeout loses the permit to a waiter, and only once
// ZooKeeper has ended its session: when the waiter is granted, the paused holder's node is gone.
func TestPausedPermitHolderLosesItsPermit(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	admin := dial(t, server.Addr, nil)
	dir := newBackend(admin).Path(name)
	paused, token := startPermitHolder(t, name, "paused-"+name, 1)
	if n := permitNodes(t, admin, dir, "paused-"+name); len(n) != 1 {
		t.Fatalf("the holder process has permit nodes %v, want 1", n)
	}

	waiter, _ := newClient(t)
	if _, err := waiter.Semaphore(name, 1).TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a second permit of 1 while the other process holds it: %v", err)
	}
	if err := paused.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer paused.Signal(syscall.SIGCONT)
	p, err := waiter.Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if n := permitNodes(t, admin, dir, "paused-"+name); len(n) != 0 {
		t.Fatalf("granted while the paused holder's node is still there (%v)", n)
	}
	if p.Token() <= token {
		t.Fatalf("the waiter's token %d is not above the paused holder's %d", p.Token(), token)
	}
	third, _ := newClient(t)
	if _, err := third.Semaphore(name, 1).TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a second permit of 1 after the hand-over: %v", err)
	}
}

// A holder that gives permits back while it keeps some (it releases its largest hold) lets a
// waiter in that now fits: the waiter watches the nodes ahead of it that took more than one
// permit, not only the line.
func TestWaiterWakesWhenPermitsAreGivenBack(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	a, _ := newClient(t)
	big, err := a.Semaphore(name, 3).Acquire(ctx, fencelock.WithOwner("a-"+name), fencelock.WithWeight(3))
	if err != nil {
		t.Fatal(err)
	}
	small, err := a.Semaphore(name, 3).Acquire(ctx, fencelock.WithOwner("a-"+name), fencelock.WithWeight(1))
	if err != nil {
		t.Fatal(err)
	}
	if small.Token() != big.Token() || small.HoldCount() != 2 {
		t.Fatalf("the re-entry: token %d count %d, want token %d count 2", small.Token(), small.HoldCount(), big.Token())
	}
	b, _ := newClient(t)
	got := make(chan error, 1)
	go func() {
		p, err := b.Semaphore(name, 3).Acquire(ctx, fencelock.WithWeight(2))
		if err == nil {
			defer p.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter in line", func() bool {
		info, err := a.Semaphore(name, 3).Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	if err := big.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter for 2 of 3 permits still waits after the holder gave 2 back")
	}
	if err := small.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock and a semaphore of the same name live in one directory without seeing each other,
// and the last one out removes it.
func TestLockAndSemaphoreOfOneName(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	c, b := newClient(t)
	lock, err := c.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := c.Semaphore(name, 1).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit beside the lock of the same name: %v", err)
	}
	other, _ := newClient(t)
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("the lock while held, beside a permit: %v", err)
	}
	if _, err := other.Semaphore(name, 1).TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("the permit while held, beside a lock: %v", err)
	}
	if info, err := b.Inspect(ctx, name); err != nil || !info.Held || info.Token != lock.Token() {
		t.Fatalf("Inspect of the lock: %+v, %v", info, err)
	}
	if info, err := b.InspectSemaphore(ctx, name); err != nil || len(info.Permits) != 1 || info.Permits[0].Token != permit.Token() {
		t.Fatalf("InspectSemaphore: %+v, %v", info, err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := b.InspectSemaphore(ctx, name); err != nil || len(info.Permits) != 1 {
		t.Fatalf("the permit after the lock's release: %+v, %v", info, err)
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, dial(t, server.Addr, nil), b.Path(name)) {
		t.Fatalf("%s is left behind", b.Path(name))
	}
}

// permitNodes returns the names of owner's permit nodes in dir.
func permitNodes(t testing.TB, conn *zk.Conn, dir, owner string) []string {
	t.Helper()
	children, _, err := conn.Children(dir)
	if err != nil && err != zk.ErrNoNode {
		t.Fatal(err)
	}
	var nodes []string
	for _, c := range children {
		if strings.HasPrefix(c, "_p_") && strings.Contains(c, "-"+zkbackend.OwnerTag(owner)+"-") {
			nodes = append(nodes, c)
		}
	}
	return nodes
}

// An owner that holds a permit here and, under the same owner ID, in another process: a
// release through a Backend that does not know the permit (its cache misses) releases this
// process's permit, the one with the hold, not the other process's node of the same owner.
// Before, it found the other process's node first, released nothing, and said so.
func TestReleaseFindsTheNodeWithTheHold(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	owner := "shared-" + name
	startPermitHolder(t, name, owner, 2)
	conn := dial(t, server.Addr, nil)
	mine, other := newBackend(conn), newBackend(conn)
	req := driver.Request{Name: name, Owner: owner, Hold: "h1", TTL: sessionTimeout, Limit: 2}
	if _, err := mine.AcquireQueued(ctx, req); err != nil {
		t.Fatal(err)
	}
	if info, err := mine.InspectSemaphore(ctx, name); err != nil || len(info.Permits) != 2 {
		t.Fatalf("both permits held: %+v, %v", info, err)
	}
	if _, err := other.Release(ctx, driver.Lease{Name: name, Owner: owner, TTL: sessionTimeout, Limit: 2}, "h1"); err != nil {
		t.Fatal(err)
	}
	if info, err := mine.InspectSemaphore(ctx, name); err != nil || len(info.Permits) != 1 {
		t.Fatalf("after the release of this process's permit: %+v, %v", info, err)
	}
}
