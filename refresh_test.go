package fencelock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/memorybackend"
	"github.com/fencelock/fencelock/redisbackend"
)

// Refresh to a shorter TTL moves the validity deadline back to the refresh's send time plus
// the new TTL: the lock must not report itself valid after Redis let it go.
func TestRefreshShorterMovesDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []fencelock.Option
	}{
		// The default interval follows the TTL; an explicit one short enough for both stays.
		{"default interval", []fencelock.Option{fencelock.WithWatchdog(false)}},
		{"explicit interval", []fencelock.Option{fencelock.WithRenewInterval(150 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			rdb := singleClient(t)
			c, other := newLocker(t, rdb), newLocker(t, rdb)
			name := lockName(t)
			lock, err := c.Obtain(ctx, name, append(tc.opts, fencelock.WithTTL(10*time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Release(ctx)
			sent := time.Now()
			if err := lock.Refresh(ctx, 500*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if until := lock.ValidUntil(); until.After(sent.Add(500 * time.Millisecond)) {
				t.Fatalf("after Refresh(500ms) the lock is valid until %v after the refresh was sent", until.Sub(sent))
			}
			if tc.name == "explicit interval" {
				return // the watchdog keeps renewing it at the new TTL
			}
			var taken *fencelock.Lock
			waitFor(t, 3*time.Second, "the refreshed lock never expired in Redis", func() bool {
				taken, err = other.TryObtain(ctx, name)
				return err == nil
			})
			defer taken.Release(ctx)
			if err := lock.Valid(); err == nil {
				t.Fatalf("the refreshed lock reports itself valid for %v more while another client holds it", time.Until(lock.ValidUntil()))
			}
		})
	}
}

// A watchdog renewal that was on its way when Refresh was called must not undo the refresh:
// neither the deadline nor the TTL in Redis may go back to the old TTL.
func TestRefreshNotUndoneByRenewalInFlight(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	slow := &heldRenewals{Backend: redisbackend.New(rdb), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	c := fencelock.New(slow)
	defer c.Close()
	name := lockName(t)
	const ttl = 3 * time.Second
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl), fencelock.WithRenewInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	select {
	case <-slow.entered: // the watchdog's renewal is on its way, held back before it is sent
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal")
	}
	refreshed := make(chan error, 1)
	sent := time.Now()
	go func() { refreshed <- lock.Refresh(ctx, 400*time.Millisecond) }()
	time.Sleep(50 * time.Millisecond)
	close(slow.gate) // the old renewal goes out now, and the refresh may go with or after it
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the held-back renewal's reply is in
	if until := lock.ValidUntil(); until.After(time.Now().Add(400 * time.Millisecond)) {
		t.Fatalf("after Refresh(400ms) sent %v ago, the lock is valid for %v more", time.Since(sent), time.Until(until))
	}
	if pttl := rdb.PTTL(ctx, slow.Key(name)).Val(); pttl > 400*time.Millisecond {
		t.Fatalf("after Refresh(400ms), Redis keeps the lock for %v", pttl)
	}
}

// heldRenewals holds back the first watchdog renewal until gate is closed.
type heldRenewals struct {
	*redisbackend.Backend
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (b *heldRenewals) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	first := false
	b.once.Do(func() { first = true })
	if first {
		b.entered <- struct{}{}
		<-b.gate
	}
	return b.Backend.Renew(ctx, leases)
}

// Release's calls are sized by the lock's TTL as Refresh last set it, not as Obtain did.
func TestReleaseUsesRefreshedTTL(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rec := &releaseTTLs{Backend: redisbackend.New(singleClient(t))}
	c := fencelock.New(rec)
	defer c.Close()
	lock, err := c.Obtain(ctx, lockName(t), fencelock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.ttls) != 1 || rec.ttls[0] != 5*time.Second {
		t.Fatalf("Release sent leases with TTLs %v, want [5s]", rec.ttls)
	}
}

// releaseTTLs records the TTL of every lease released through it.
type releaseTTLs struct {
	*redisbackend.Backend
	mu   sync.Mutex
	ttls []time.Duration
}

func (b *releaseTTLs) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	b.mu.Lock()
	b.ttls = append(b.ttls, lease.TTL)
	b.mu.Unlock()
	return b.Backend.Release(ctx, lease, hold)
}

var _ = errors.Is

// A Refresh to a shorter TTL whose answer does not come in time may still have been applied:
// the lock must then be trusted no longer than the shorter TTL from the send, since the store
// may let it go that soon.
func TestRefreshShorterWithoutAnswerMovesDeadline(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	server := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, other := newLocker(t, rdb), newLocker(t, server.ClientT(t))
	name := lockName(t)
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	if err := lock.Refresh(ctx, 10*time.Second); err != nil { // the renewal script is loaded
		t.Fatal(err)
	}
	// The server stopped (SIGSTOP) while the Refresh is sent: it runs the Refresh once it goes
	// on, after the caller has given up.
	if err := server.Pause(); err != nil {
		t.Fatal(err)
	}
	defer server.Resume()
	sent := time.Now()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = lock.Refresh(short, 400*time.Millisecond)
	cancel()
	if e := server.Resume(); e != nil {
		t.Fatal(e)
	}
	if err == nil {
		t.Fatal("Refresh answered by a stopped server")
	}
	var taken *fencelock.Lock
	waitFor(t, 5*time.Second, "the refresh never reached Redis", func() bool {
		taken, err = other.TryObtain(ctx, name)
		return err == nil
	})
	defer taken.Release(ctx)
	if err := lock.Valid(); err == nil {
		t.Fatalf("after a Refresh(400ms) without an answer, the lock reports itself valid for %v more (%v after the send) while another client holds it",
			time.Until(lock.ValidUntil()).Round(time.Millisecond), time.Since(sent).Round(time.Millisecond))
	}
}

// A Refresh to a shorter TTL may be applied the moment the store receives it, however late its
// answer comes: while it is on its way, the lock must be trusted no longer than the shorter TTL
// from the send. Found by the nemesis (seed 791579613): a Refresh(400ms) sent to a stopped
// server left the lock valid for its old TTL until the call failed, 1s later.
func TestRefreshShorterInFlightIsNotTrusted(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	server := testserver.StartRedis(t)
	c := newLocker(t, server.ClientT(t))
	name := lockName(t)
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	if err := lock.Refresh(ctx, 10*time.Second); err != nil { // the renewal script is loaded
		t.Fatal(err)
	}
	// The server stopped (SIGSTOP), as in the nemesis's finding: the Refresh is sent, and its
	// answer waits until the server goes on.
	if err := server.Pause(); err != nil {
		t.Fatal(err)
	}
	defer server.Resume()
	sent := time.Now()
	refreshed := make(chan error, 1)
	go func() { refreshed <- lock.Refresh(ctx, 200*time.Millisecond) }()
	// The lock stops being trusted about 200 ms after the send, while the call still waits.
	waitFor(t, 5*time.Second, "the lock is still trusted with a Refresh(200ms) on its way", func() bool {
		if lock.Valid() == nil {
			return false
		}
		select {
		case err := <-refreshed:
			t.Fatalf("Refresh returned (%v) %v after its send, before the lock stopped being trusted", err, time.Since(sent).Round(time.Millisecond))
		default:
		}
		return true
	})
	if err := server.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-refreshed; err == nil {
		t.Error("a Refresh(200ms) confirmed after its own validity had passed returned nil")
	}
}

// heldRefresh is a Backend whose Renew of a Refresh waits until a Release has reached the
// store, or 10 ms have passed: the order in which a Refresh and a concurrent Release of the
// same Client arrive when the network reorders them.
type heldRefresh struct {
	*memorybackend.Backend
	released chan struct{}
}

func (b *heldRefresh) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	if len(leases) == 1 && leases[0].Refresh {
		select {
		case <-b.released:
		case <-time.After(10 * time.Millisecond):
		}
	}
	return b.Backend.Renew(ctx, leases)
}

func (b *heldRefresh) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	n, err := b.Backend.Release(ctx, lease, hold)
	select {
	case b.released <- struct{}{}:
	default:
	}
	return n, err
}

// A Refresh to a shorter TTL never cuts short the hold of another Client under the same owner
// (WithOwner across processes): the store shortens the lock only when the caller holds every
// hold of it. The caller's count of its holds was taken before a concurrent Release of one of
// them reached the store, which then counted the other Client's hold as the caller's and cut
// its lock short: another owner got it while that Client still trusted it (the simulation,
// seed 478017345).
func TestRefreshBesideAConcurrentReleaseLeavesAnotherClientsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := memorybackend.New()
		a := fencelock.New(&heldRefresh{Backend: store.Backend(), released: make(chan struct{}, 1)})
		b, c := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		defer c.Close()
		shared := fencelock.WithOwner("shared")
		theirs, err := b.TryObtain(ctx, "r", shared, fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer theirs.Release(context.Background())
		one, err := a.TryObtain(ctx, "r", shared, fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		two, err := a.TryObtain(ctx, "r", shared, fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		refreshed := make(chan error, 1)
		go func() { refreshed <- one.Refresh(ctx, 40*time.Millisecond) }()
		synctest.Wait() // the Refresh is on its way
		if err := two.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-refreshed; err != nil {
			t.Fatal(err)
		}
		if err := one.Release(ctx); err != nil { // this Client is done: no renewal of its own
			t.Fatal(err)
		}
		time.Sleep(time.Second) // past the 40 ms the Refresh asked for
		if err := theirs.Valid(); err != nil {
			t.Fatalf("the other Client's hold: %v", err)
		}
		if l, err := c.TryObtain(ctx, "r"); err == nil {
			_ = l.Release(ctx)
			t.Fatal("another owner got the lock while a Client under the shared owner still trusted its hold")
		}
	})
}
