package redlock_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// Reentrancy lives in the nodes, per hold ID: a retried acquire or release of the same hold
// counts once.
func TestHoldsCountOnce(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b := newBackend(t, dial(t, addrs))
	ttl := 2 * time.Second
	req := driver.Request{Name: t.Name(), Owner: "holder", Hold: "h1", TTL: ttl}
	lease := driver.Lease{Name: req.Name, Owner: req.Owner, TTL: ttl}
	first, err := b.Acquire(ctx, req)
	if err != nil || first.Count != 1 || first.Validity <= 0 || first.Validity > ttl {
		t.Fatalf("first: %+v %v", first, err)
	}
	inner := req
	inner.Hold = "h2"
	for range 2 { // the second is a retry of the same hold
		g, err := b.Acquire(ctx, inner)
		if err != nil || g.Count != 2 || g.Token != first.Token {
			t.Fatalf("inner: %+v %v, want count 2 and token %d", g, err, first.Token)
		}
	}
	for range 2 {
		if n, err := b.Release(ctx, lease, "h2"); err != nil || n != 1 {
			t.Fatalf("inner release: %d %v, want 1 left", n, err)
		}
	}
	if info, err := b.Inspect(ctx, req.Name); err != nil || !info.Held || info.Count != 1 || info.Token != first.Token {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
	if n, err := b.Release(ctx, lease, "h1"); err != nil || n != 0 {
		t.Fatalf("last release: %d %v", n, err)
	}
	// Release returns once a majority answered; Close waits for the other nodes.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = newBackend(t, dial(t, addrs))
	if _, err := b.Release(ctx, lease, "h1"); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("release of a free lock: %v, want ErrNotHeld", err)
	}
	if r := b.Renew(ctx, []driver.Lease{lease}); !errors.Is(r[0].Err, fencelock.ErrNotHeld) {
		t.Fatalf("renewal of a free lock: %v, want ErrNotHeld", r[0].Err)
	}
}

// A refused acquisition says how long the holder keeps a majority, and leaves nothing behind.
func TestHeldErrorRemaining(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clients := dial(t, addrs)
	b := newBackend(t, clients)
	other := redlock.New(dial(t, addrs))
	name := t.Name()
	ttl := 5 * time.Second
	if _, err := b.Acquire(ctx, driver.Request{Name: name, Owner: "a", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	_, err := other.Acquire(ctx, driver.Request{Name: name, Owner: "b", TTL: ttl})
	var held *fencelock.HeldError
	if !errors.As(err, &held) || !errors.Is(err, fencelock.ErrNotObtained) || errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("acquire of a held lock: %v", err)
	}
	if held.Remaining <= ttl-time.Second || held.Remaining > ttl {
		t.Fatalf("remaining %v of TTL %v", held.Remaining, ttl)
	}
	// Acquire returns once a majority decided; Close waits for the other calls, the undo of
	// b's grants on nodes that a's acquisition had not reached yet included.
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	got := owners(clients, b.Key(name))
	if slices.Contains(got, "b") || len(slices.DeleteFunc(slices.Clone(got), func(o string) bool { return o != "a" })) < 3 {
		t.Fatalf("owners after the refused acquisition: %q; want a on a majority, b nowhere", got)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: name, Owner: "a", TTL: ttl}, ""); err != nil {
		t.Fatal(err)
	}
}

// A waiter wakes on the release while two of five nodes are down, long before the holder's TTL.
func TestWaiterWakesWithNodesDown(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	servers, as := startNodes(t, 5)
	holder := newLocker(t, newBackend(t, dial(t, as)))
	wb := newBackend(t, dial(t, as))
	waiter := newLocker(t, wb)
	if _, err := holder.Inspect(ctx, "wake"); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Inspect(ctx, "wake"); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[3:] {
		_ = s.Kill()
	}
	lock, err := holder.Obtain(ctx, "wake", fencelock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Obtain(ctx, "wake", fencelock.WithTTL(30*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// The waiter is subscribed on the three nodes up, the majority WatchRelease waits for.
	waitListening(t, dial(t, as[:3]), wb.Key("wake")+":released", 3)
	released := time.Now()
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter slept through the release")
	}
	t.Logf("handoff with 2 of 5 nodes down: %v", time.Since(released))
}

func TestForceReleaseAndList(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b := newBackend(t, dial(t, addrs), redlock.WithPrefix("list-test:"))
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(5*time.Second)))
	var locks []*fencelock.Lock
	for _, name := range []string{"job:a", "job:b", "job:*", "other"} {
		l, err := c.Obtain(ctx, name, fencelock.WithMetadata("meta of "+name))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	infos, err := fencelock.List(ctx, b, "job:")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
		if !info.Held || info.Meta != "meta of "+info.Name {
			t.Fatalf("listed %+v", info)
		}
	}
	if !slices.Equal(names, []string{"job:*", "job:a", "job:b"}) {
		t.Fatalf("listed %q", names)
	}
	info, err := b.ForceRelease(ctx, "job:a")
	if err != nil || !info.Held || info.Owner != locks[0].Owner() {
		t.Fatalf("ForceRelease: %+v %v", info, err)
	}
	select {
	case <-locks[0].Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder did not notice the forced release")
	}
	if !errors.Is(locks[0].Context().Err(), fencelock.ErrLost) {
		t.Fatalf("context: %v", locks[0].Context().Err())
	}
	if info, err := b.ForceRelease(ctx, "job:a"); err != nil || info.Held {
		t.Fatalf("second ForceRelease: %+v %v", info, err)
	}
	for _, l := range locks[1:] {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Every node keeps a lock the way package redisbackend does, so tools that read one Redis
// server (fencelock status, doctor) read a Redlock node too.
func TestNodesReadableBySingleNodeBackend(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clients := dial(t, addrs)
	b := newBackend(t, clients)
	c := newLocker(t, b)
	lock, err := c.Obtain(ctx, t.Name(), fencelock.WithMetadata("pid 7"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	b.Settle() // Obtain returned at the majority; the other nodes a moment later
	for i, node := range clients {
		info, err := redisbackend.New(node).Inspect(ctx, t.Name())
		if err != nil || !info.Held || info.Owner != lock.Owner() || info.Token != lock.Token() || info.Meta != "pid 7" {
			t.Fatalf("node %d as one Redis: %+v %v", i, info, err)
		}
	}
}
