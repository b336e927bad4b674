package zkbackend_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// Waiters obtain the lock in the order they queued, and one that gives up in the middle of
// the line lets no one jump ahead.
func TestFirstComeFirstServed(t *testing.T) {
	const waiters = 5
	const quitter = 2
	holder, b := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := b.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	quit, quitNow := context.WithCancel(ctx)
	defer quitNow()
	for i := range waiters {
		c, _ := newClient(t)
		wctx := ctx
		if i == quitter {
			wctx = quit
		}
		go func() {
			l, err := c.Obtain(wctx, name)
			if err != nil {
				errs <- err
				return
			}
			order <- i
			time.Sleep(10 * time.Millisecond)
			errs <- l.Release(ctx)
		}()
		// Join one at a time, so that the order in line is known.
		waitFor(t, 10*time.Second, "the waiter in line", func() bool { return len(line(t, admin, dir)) == i+2 })
	}

	quitNow()
	if err := <-errs; !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	waitFor(t, 5*time.Second, "the quitter's node to go", func() bool { return len(line(t, admin, dir)) == waiters })
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var got []int
	for range waiters - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		got = append(got, <-order)
	}
	if want := []int{0, 1, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("obtained in the order %v, want %v", got, want)
	}
	if exists(t, admin, dir) {
		t.Fatalf("%s left behind", dir)
	}
}

// Each waiter watches only the node just ahead of it, so a release wakes one waiter, not the
// herd. The server's own watch table (the wchp command) shows who watches what.
func TestWaitersWatchOnlyTheNodeAhead(t *testing.T) {
	const waiters = 4
	holder, b := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := b.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, waiters)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for i := range waiters {
		c, _ := newClient(t)
		go func() {
			_, err := c.Obtain(wctx, name)
			done <- err
		}()
		waitFor(t, 10*time.Second, "the waiter in line", func() bool { return len(line(t, admin, dir)) == i+2 })
	}

	q := line(t, admin, dir)
	var watched map[string]int
	waitFor(t, 10*time.Second, "a watch per waiter", func() bool {
		watched = watches(t, dir)
		return len(watched) == waiters
	})
	for i, node := range q {
		want := 1
		if i == len(q)-1 {
			want = 0 // the last in line: no one is behind it
		}
		if got := watched[dir+"/"+node]; got != want {
			t.Errorf("node %d in line has %d watchers, want %d (watch table %v)", i, got, want, watched)
		}
	}
	if n := watched[dir]; n != 0 {
		t.Errorf("%d watchers on the directory itself", n)
	}

	stop()
	for range waiters {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("waiter: %v", err)
		}
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// watches returns, per watched path under dir, the number of sessions watching it.
func watches(t *testing.T, dir string) map[string]int {
	t.Helper()
	out, err := server.FourLetter("wchp")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]int)
	path := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "/"):
			path = l
		case strings.TrimSpace(l) != "" && (path == dir || strings.HasPrefix(path, dir+"/")):
			m[path]++
		}
	}
	return m
}

// A waiter whose context ends deletes its node and reports both ErrNotObtained and the
// context's error.
func TestWaiterLeavesTheLine(t *testing.T) {
	holder, b := newClient(t)
	waiter, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := lockName(t)
	dir := b.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = waiter.Obtain(short, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	// Its node goes within leaveGrace of the deadline, or, on a slow server, as owed work
	// soon after.
	waitFor(t, 5*time.Second, "the waiter's node still in line", func() bool { return len(line(t, admin, dir)) == 1 })
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, admin, dir) {
		t.Fatalf("%s left behind", dir)
	}
}

// A waiter that gives up while cut off from the server cannot delete its node, which would
// reach the head of the line and hold the lock for no one. Once the connection is back (same
// session), the Backend removes it.
func TestNodeLeftByAFailedLeaveIsRemoved(t *testing.T) {
	// Long enough to survive the cut: go-zookeeper redials a lone server only every second.
	const session = 8 * time.Second
	holder, bh := newClient(t)
	var link zktest.Link
	conn := dialSession(t, server.Addr, link.Dial, session)
	b := zkbackend.New(conn, zkbackend.WithSessionTimeout(session))
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := bh.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	wctx, giveUp := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := b.AcquireQueued(wctx, driver.Request{Name: name, Owner: "waiter", Hold: "h", TTL: session})
		waited <- err
	}()
	waitFor(t, 10*time.Second, "the waiter in line", func() bool { return len(line(t, admin, dir)) == 2 })
	// Its watch on the holder's node is the waiter's last request before it blocks.
	waitFor(t, 10*time.Second, "the waiter waiting", func() bool { return watches(t, dir)[dir+"/"+line(t, admin, dir)[0]] == 1 })
	id := conn.SessionID()

	link.Cut()
	waitFor(t, 5*time.Second, "the disconnect", func() bool { return conn.State() != zk.StateHasSession })
	giveUp()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
	if n, q := b.Owed(), line(t, admin, dir); n != 1 || len(q) != 2 {
		t.Fatalf("%d owed, line %v: want the waiter's node owed and still in line", n, q)
	}

	link.Restore()
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return conn.State() == zk.StateHasSession })
	if conn.SessionID() != id {
		t.Fatal("the session expired: nothing left to remove")
	}
	waitFor(t, 5*time.Second, "the owed removal", func() bool { return b.Owed() == 0 && len(line(t, admin, dir)) == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// A waiter that waits longer than the TTL keeps its place: its grant is counted from the read
// that found it first in line, not from when it began to wait. The grant used to report no
// wait at all, so the Client took it for one that arrived after its validity, released it and
// queued again at the back: the next waiter got the lock first.
func TestLongWaitKeepsItsPlace(t *testing.T) {
	holder, b := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := b.Path(name)

	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup // the waiters, done before the test's context is cancelled
	defer wg.Wait()
	var mu sync.Mutex // guards released, began and grant
	released := make(map[int]time.Time)
	order := make(chan int, 3)
	hold := func(i int, release func() error) {
		order <- i
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		released[i] = time.Now()
		mu.Unlock()
		if err := release(); err != nil {
			t.Error(err)
		}
	}
	for i := range 2 {
		c, _ := newClient(t)
		wg.Go(func() {
			l, err := c.Obtain(ctx, name)
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			hold(i, func() error { return l.Release(ctx) })
		})
		waitFor(t, 10*time.Second, "the waiter in line", func() bool { return len(line(t, admin, dir)) == i+2 })
	}
	// The third waiter calls the backend itself, to see what its grant says.
	direct := newBackend(dial(t, server.Addr, nil))
	var grant driver.Grant
	var began time.Time // guarded by mu
	wg.Go(func() {
		// Stamped here, not before wg.Go: the start that Elapsed counts from comes after it,
		// and a goroutine slow to start would otherwise move began before it by more than the
		// read comes after the release (seen under load: 4.037s against Elapsed 4.0372s).
		mu.Lock()
		began = time.Now()
		mu.Unlock()
		g, err := direct.AcquireQueued(ctx, driver.Request{Name: name, Owner: "direct", TTL: sessionTimeout})
		if err != nil {
			t.Error(err)
			order <- -1
			return
		}
		mu.Lock()
		grant = g
		mu.Unlock()
		hold(2, func() error {
			_, err := direct.Release(ctx, driver.Lease{Name: name, Owner: "direct"}, "")
			return err
		})
	})
	waitFor(t, 10*time.Second, "the third waiter in line", func() bool { return len(line(t, admin, dir)) == 4 })

	time.Sleep(2 * sessionTimeout)
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := []int{<-order, <-order, <-order} // -1: that waiter failed
	if want := []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("after a wait longer than the TTL the waiters got the lock in the order %v, want %v", got, want)
	}
	// The read that found the third waiter first came after the second one began to release.
	// Elapsed counts from the backend's own start, which comes after began by as long as the
	// goroutine took to get there (under load: 0.2 ms past the stamp in CI); the wait it must
	// count is seconds long, so a slack of 50 ms tells the two apart.
	mu.Lock()
	defer mu.Unlock()
	if least := released[1].Sub(began) - 50*time.Millisecond; grant.Elapsed < least {
		t.Fatalf("grant %+v after a wait of more than %v: Elapsed must count the wait", grant, least.Round(time.Millisecond))
	}
}

// A release under contention leaves the directory to the line and the last one out removes
// it; a Backend that remembers the directory as busy after it is gone still takes the lock,
// and leaves nothing behind.
func TestContendedReleasesLeaveNothingBehind(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	a, ab := newClient(t)
	w, _ := newClient(t)
	admin := dial(t, server.Addr, nil)
	dir := ab.Path(name)
	for round := range 3 {
		first, err := a.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := obtainBehind(ctx, t, w, admin, dir, name)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second := <-got
		if second == nil {
			t.FailNow()
		}
		if !exists(t, admin, dir) {
			t.Fatalf("round %d: the directory went while the waiter holds the lock", round)
		}
		if err := second.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if exists(t, admin, dir) {
			t.Fatalf("round %d: %s left behind after the last release: %v", round, dir, line(t, admin, dir))
		}
	}
}

// A node made in a directory others are in (one multi with a SetData of the directory, whose
// mzxid is then the node's czxid) gets its czxid as its token, the token Inspect and the
// node's own stat show, without a read of the node: for waiters first in line at once as for
// those that waited, and for a semaphore's permit as for a lock.
func TestNodeMadeBesideOthersHasItsCzxidAsToken(t *testing.T) {
	holder, b := newClient(t)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := lockName(t)
	dir := b.Path(name)
	first, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := holder.Semaphore(name, 3).Acquire(ctx) // keeps the directory there
	if err != nil {
		t.Fatal(err)
	}
	czxid := func(token int64) int64 {
		t.Helper()
		children, _, err := admin.Children(dir) // lock and permit nodes
		if err != nil {
			t.Fatal(err)
		}
		for _, child := range children {
			if _, st, err := admin.Get(dir + "/" + child); err == nil && st.Czxid == token {
				return st.Czxid
			}
		}
		return 0
	}
	w, _ := newClient(t)
	got := obtainBehind(ctx, t, w, admin, dir, name)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waited := <-got
	if waited == nil {
		t.FailNow()
	}
	other, err := w.Semaphore(name, 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*fencelock.Lock{waited, other} {
		if czxid(l.Token()) != l.Token() || l.Token() <= first.Token() {
			t.Errorf("token %d: no node in %s has it as its czxid (the first holder's was %d)", l.Token(), dir, first.Token())
		}
	}
	if info, err := b.Inspect(ctx, name); err != nil || info.Token != waited.Token() {
		t.Errorf("Inspect: %+v, %v; want token %d", info, err, waited.Token())
	}
	for _, l := range []*fencelock.Lock{waited, other, permit} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
