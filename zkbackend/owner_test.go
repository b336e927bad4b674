package zkbackend_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// WithOwner across two Backends of one process: the second one's hold goes into the node the
// first one's session owns, so it lasts only as long as that session. The second Backend's
// renewals must vouch for that session, not its own. Cut off from the server, the first
// session expires and a third client gets the lock: by then the second one's lock must have
// ended. It used to stay valid, renewed on the strength of its own session, for up to a
// session timeout after the node was gone.
func TestWithOwnerLastsAsLongAsTheNodesSession(t *testing.T) {
	var link zktest.Link
	p1 := fencelock.New(newBackend(dial(t, server.Addr, link.Dial)), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	t.Cleanup(func() { _ = p1.Close() })
	p2, _ := newClient(t)
	p3, _ := newClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	owner := fencelock.WithOwner("shared-" + name)

	l1, err := p1.Obtain(ctx, name, owner)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := p2.TryObtain(ctx, name, owner)
	if err != nil {
		t.Fatalf("the same owner through another session: %v", err)
	}
	if l2.Token() != l1.Token() || l2.HoldCount() != 2 {
		t.Fatalf("token %d count %d, want %d and 2", l2.Token(), l2.HoldCount(), l1.Token())
	}
	time.Sleep(sessionTimeout) // a few renewals of both
	if err := l2.Valid(); err != nil {
		t.Fatalf("the second hold, both sessions alive: %v", err)
	}

	link.Cut()
	cut := time.Now()
	l3, err := p3.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := time.Since(cut)
	if err := l2.Valid(); err == nil {
		t.Fatalf("a third client holds the lock (token %d) %v after the first session was cut off, and the second hold (token %d) is still valid for %v", l3.Token(), got.Round(time.Millisecond), l2.Token(), time.Until(l2.ValidUntil()).Round(time.Millisecond))
	}
	if err := l1.Valid(); err == nil {
		t.Fatal("the first hold is still valid")
	}
	_ = l3.Release(ctx)
}

// WithOwner across processes: this process cannot know whether another process's session
// lives, beyond its node existing when asked, so it must not vouch for a lock that lives in
// that node. It takes a place in line of its own instead, and holds the lock once the other
// process's node is gone. It used to enter that node and vouch for it with its own session:
// with the other process paused past its session timeout, a third client got the lock while
// this one still trusted it.
func TestWithOwnerInAnotherProcess(t *testing.T) {
	p2, _ := newClient(t)
	p3, _ := newClient(t)
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	owner := "shared-" + name
	p1, token1 := startHolder(t, name, owner)

	l2, err := p2.TryObtain(ctx, name, fencelock.WithOwner(owner))
	if err == nil {
		// It entered the other process's node: show what that costs.
		if err := p1.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		l3, err := p3.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := time.Since(paused)
		if err := l2.Valid(); err == nil {
			t.Fatalf("a third client holds the lock (token %d) %v after the other process paused, and this process's hold of its node (token %d) is still valid for %v", l3.Token(), got.Round(time.Millisecond), l2.Token(), time.Until(l2.ValidUntil()).Round(time.Millisecond))
		}
		t.Fatalf("this process entered a node of another process's session (token %d), which it cannot vouch for", l2.Token())
	}
	if !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("the same owner, the node of another process's session: %v, want ErrNotObtained", err)
	}

	// Waiting, it takes a place in line behind the other process's node, and holds the lock
	// with a node of its own once that one ends with its session.
	if err := p1.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	l2, err = p2.Obtain(ctx, name, fencelock.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= token1 || l2.HoldCount() != 1 {
		t.Fatalf("token %d count %d: want a node of its own, after the other process's token %d", l2.Token(), l2.HoldCount(), token1)
	}
	if _, err := p3.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another owner while the lock is held: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// holderEnv names the server, the lock and owner a child process of the test binary holds
// (see runHolder), as "addr name owner", and for a permit the semaphore's limit after them.
const holderEnv = "ZKBACKEND_TEST_HOLDER"

// startHolder starts a process that holds name for owner through a session of its own, and
// returns it once it holds the lock, with the lock's token. The process is killed when the
// test ends.
func startHolder(t *testing.T, name, owner string) (*os.Process, int64) {
	t.Helper()
	return startHolderOf(t, name+" "+owner)
}

// startPermitHolder is startHolder for a permit of the semaphore name of limit permits.
func startPermitHolder(t *testing.T, name, owner string, limit int) (*os.Process, int64) {
	t.Helper()
	return startHolderOf(t, name+" "+owner+" "+strconv.Itoa(limit))
}

func startHolderOf(t *testing.T, spec string) (*os.Process, int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+server.Addr+" "+spec)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the holder process: %v", err)
	}
	token, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "held "), 10, 64)
	if err != nil {
		t.Fatalf("the holder process said %q", line)
	}
	return cmd.Process, token
}

// Two goroutines of one process wait under one owner (WithOwner) for a lock another holds:
// once the first of them holds it, the second enters its node, a second hold of the owner's
// lock, as it would have entered it had it come later. It used to watch only the node just
// ahead of its own, the first one's, which does not change when it comes to hold: the owner
// waited for itself until its first hold was released.
func TestOneOwnerWaitsTwiceForALock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	other, b := newClient(t)
	held, err := other.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 2)
	c := fencelock.New(newBackend(dial(t, server.Addr, nil)), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)),
		fencelock.WithObserver(func(e fencelock.Event) {
			if e.Kind == fencelock.EventWaiting && e.Name == name {
				waiting <- struct{}{}
			}
		}))
	t.Cleanup(func() { _ = c.Close() })
	owner := "owner-" + name
	locks := make(chan *fencelock.Lock, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			l, err := c.Obtain(ctx, name, fencelock.WithOwner(owner))
			if err != nil {
				errs <- err
				return
			}
			locks <- l
		}()
	}
	for range 2 {
		select {
		case <-waiting:
		case err := <-errs:
			t.Fatalf("a waiter of the owner: %v", err)
		}
	}
	if n := len(line(t, dial(t, server.Addr, nil), b.Path(name))); n != 3 {
		t.Fatalf("%d nodes in line, want the holder's and one per waiter", n)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var mine []*fencelock.Lock
	for range 2 {
		select {
		case l := <-locks:
			mine = append(mine, l)
		case err := <-errs:
			t.Fatalf("a waiter of the owner, once the other holder released: %v", err)
		}
	}
	info, err := other.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != owner || info.Count != 2 || mine[0].Token() != mine[1].Token() {
		t.Fatalf("both waiters of one owner hold: Inspect says %+v, tokens %d and %d; want one lock of %q with 2 holds", info, mine[0].Token(), mine[1].Token(), owner)
	}
	if err := mine[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mine[1].Valid(); err != nil {
		t.Fatalf("the owner's other hold after one was released: %v", err)
	}
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another owner while one hold of the owner remains: %v, want ErrNotObtained", err)
	}
	if err := mine[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("the lock once the owner released both holds: %v", err)
	}
	_ = l.Release(ctx)
}
