package fencelock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// Work that runs 10× the TTL keeps the lock.
func TestWatchdogKeepsLock(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxTimeout(t, 10*time.Second)
		c, other := newLocker(t, rdb), newLocker(t, rdb)
		name := lockName(t)
		const ttl = 250 * time.Millisecond
		lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * ttl)
		if err := lock.Context().Err(); err != nil {
			t.Fatalf("lost after 10 TTLs: %v", err)
		}
		if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("another client got the lock: %v", err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// When the lock's key is deleted, overwritten or flushed, the holder's context ends within a
// renewal interval and the callback is told.
func TestLossCancelsContext(t *testing.T) {
	cases := []struct {
		name  string
		fault func(ctx context.Context, rdb redis.UniversalClient, key string) error
	}{
		{"deleted", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			return rdb.Del(ctx, key).Err()
		}},
		{"overwritten", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			return rdb.Set(ctx, key, "1 h someone-else", redis.KeepTTL).Err() // a plain lock (redisbackend's lock.lua)
		}},
		{"flushall", func(ctx context.Context, rdb redis.UniversalClient, key string) error {
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					return m.FlushAll(ctx).Err()
				})
			}
			return rdb.FlushAll(ctx).Err()
		}},
	}
	forEachDeployment(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := ctxTimeout(t, 10*time.Second)
				b := redisbackend.New(rdb)
				c := fencelock.New(b)
				defer c.Close()
				name := lockName(t)
				told := make(chan error, 1)
				lock, err := c.Obtain(ctx, name, fencelock.WithTTL(300*time.Millisecond),
					fencelock.WithOnLost(func(_ string, err error) { told <- err }))
				if err != nil {
					t.Fatal(err)
				}
				if err := tc.fault(ctx, rdb, b.Key(name)); err != nil {
					t.Fatal(err)
				}
				select {
				case <-lock.Context().Done():
				case <-time.After(2 * time.Second):
					t.Fatal("context not cancelled after the key was lost")
				}
				if err := lock.Context().Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, context.Canceled) {
					t.Fatalf("context error %v: want ErrLost and Canceled", err)
				}
				if err := <-told; !errors.Is(err, fencelock.ErrLost) {
					t.Fatalf("callback told %v", err)
				}
				if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
					t.Fatalf("release of a lost lock: %v, want ErrNotHeld", err)
				}
			})
		}
	})
}

// With the server unreachable (a partition: no reset, just silence), the lock is lost when the
// client's own validity deadline passes, though Redis never answers.
func TestLossWhenServerUnreachable(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	proxy := testserver.StartProxy(t, single.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)
	const ttl = 300 * time.Millisecond
	lock, err := c.Obtain(ctx, lockName(t), fencelock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	cut := time.Now()
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context not cancelled while the server was unreachable")
	}
	if gone := time.Since(cut); gone > ttl {
		// The deadline runs from the acquire or the last confirmed renewal, so loss comes
		// before the TTL has run from the cut; report rather than assert the timing.
		t.Logf("loss noticed %v after the cut (TTL %v)", gone, ttl)
	}
	if !errors.Is(lock.Context().Err(), fencelock.ErrLost) {
		t.Fatalf("got %v", lock.Context().Err())
	}
	proxy.Restore()
	_ = lock.Release(ctx)
}

// skewClock is a clock that tests can move forward, as if the process had been paused.
type skewClock struct{ offset atomic.Int64 }

func (s *skewClock) now() time.Time          { return time.Now().Add(time.Duration(s.offset.Load())) }
func (s *skewClock) advance(d time.Duration) { s.offset.Add(int64(d)) }

// A holder resuming from a pause past its validity deadline must see the loss on its very next
// check, before any timer of the client could have fired.
func TestLossSeenSynchronouslyAfterPause(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	clock := &skewClock{}
	c := newLocker(t, singleClient(t), fencelock.WithClock(clock.now))
	const ttl = 10 * time.Second
	lock, err := c.Obtain(ctx, lockName(t), fencelock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Valid(); err != nil {
		t.Fatal(err)
	}
	clock.advance(ttl) // the "pause": no timer fires, the clock just moves on
	if err := lock.Context().Err(); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("right after the pause, Context().Err() = %v; want ErrLost", err)
	}
	if err := lock.Valid(); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Valid() = %v", err)
	}
	_ = lock.Release(ctx)
}

// The same check through Done(), for holders that select on it.
func TestLossSeenThroughDoneAfterPause(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	clock := &skewClock{}
	c := newLocker(t, singleClient(t), fencelock.WithClock(clock.now))
	lock, err := c.Obtain(ctx, lockName(t), fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(20 * time.Second)
	select {
	case <-lock.Context().Done():
	default:
		t.Fatal("Done() not closed right after the pause")
	}
	_ = lock.Release(ctx)
}

// Renewal has stopped by the time Release returns: no renewal event after it.
func TestReleaseStopsRenewal(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	var mu sync.Mutex
	var released bool
	var renewedAfter int
	lost := map[int64]bool{}
	observe := func(e fencelock.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Kind == fencelock.EventRenewed && released {
			renewedAfter++
		}
		if e.Kind == fencelock.EventLost {
			lost[e.Token] = true
		}
	}
	c := newLocker(t, singleClient(t), fencelock.WithObserver(observe))
	const ttl = 90 * time.Millisecond
	for i := 0; i < 20; i++ {
		lock, err := c.Obtain(ctx, lockName(t), fencelock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl/3 + time.Duration(i)*time.Millisecond/2)
		// With a 90 ms TTL a busy machine can make a renewal late: a lock lost so is released
		// by its Client (after its EventLost), and its Release then finds it gone.
		if err := lock.Release(ctx); err != nil {
			mu.Lock()
			wasLost := lost[lock.Token()]
			mu.Unlock()
			if !wasLost || !errors.Is(err, fencelock.ErrNotHeld) {
				t.Fatal(err)
			}
		}
		mu.Lock()
		released = true
		mu.Unlock()
		time.Sleep(ttl)
		mu.Lock()
		released = false
		mu.Unlock()
	}
	if renewedAfter != 0 {
		t.Fatalf("%d renewals after Release returned", renewedAfter)
	}
}

// With the watchdog off the lock expires unless refreshed by hand.
func TestRefreshByHand(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	c, other := newLocker(t, rdb), newLocker(t, rdb)
	name := lockName(t)
	const ttl = 300 * time.Millisecond
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		time.Sleep(ttl / 3)
		if err := lock.Refresh(ctx, 0); err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
	}
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("lock free while refreshed: %v", err)
	}
	if err := lock.Refresh(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, redisbackend.New(rdb).Key(name)).Val(); pttl <= ttl {
		t.Fatalf("refresh with a longer TTL left PTTL %v", pttl)
	}
	// Without refreshes the lock runs out, and its context says so.
	select {
	case <-lock.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("context still alive after the TTL ran out without refresh")
	}
	if !errors.Is(lock.Context().Err(), fencelock.ErrLost) {
		t.Fatalf("got %v", lock.Context().Err())
	}
	if err := lock.Refresh(ctx, 0); err == nil {
		t.Fatal("refresh of an expired lock succeeded")
	}
}

// One client holding many locks renews them in batches, not one goroutine or round trip each.
func TestRenewalsAreBatched(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	var renewCalls atomic.Int64
	rdb := singleClient(t)
	counting := &countingBackend{Backend: redisbackend.New(rdb), renews: &renewCalls}
	c := fencelock.New(counting)
	defer c.Close()
	const n, ttl = 200, 300 * time.Millisecond
	locks := make([]*fencelock.Lock, n)
	for i := range locks {
		l, err := c.Obtain(ctx, lockName(t, string(rune('a'+i%26)), time.Now().String()), fencelock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = l
	}
	time.Sleep(3 * ttl)
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// 200 locks over 9 renewal intervals: one call per lock and interval would be 1800; the
	// scheduler settles into at most a few batches per interval.
	if got := renewCalls.Load(); got == 0 || got > 9*3 {
		t.Fatalf("%d Renew calls for %d locks over 9 intervals", got, n)
	}
	t.Logf("%d Renew calls for %d locks over 9 renewal intervals", renewCalls.Load(), n)
}

type countingBackend struct {
	*redisbackend.Backend
	renews *atomic.Int64
}

func (c *countingBackend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	c.renews.Add(1)
	return c.Backend.Renew(ctx, leases)
}

// A backend may vouch for a grant for less than the TTL (a Redis hand-over lasts as long as a
// place in line until the new holder renews it). The first renewal then comes within a third
// of that validity, and the later ones at the configured interval, not at the short pace.
func TestShortGrantValidityHastensOnlyTheFirstRenewal(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	var renewCalls atomic.Int64
	rdb := singleClient(t)
	short := &shortGrantBackend{countingBackend{Backend: redisbackend.New(rdb), renews: &renewCalls}}
	c := fencelock.New(short)
	defer c.Close()
	const ttl = 900 * time.Millisecond // renewed every 300ms
	l, err := c.TryObtain(ctx, lockName(t), fencelock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	if err := l.Valid(); err != nil {
		t.Fatalf("lost a lock whose first renewal had to come within 50ms: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The first renewal at about 50ms, then one every 300ms: 4 or 5 in 1.2s. At the pace of
	// the short validity (every 50ms) it would be about 24.
	if got := renewCalls.Load(); got < 2 || got > 8 {
		t.Fatalf("%d renewals in 1.2s of a lock renewed every 300ms", got)
	}
}

// shortGrantBackend vouches for every grant for 150ms only.
type shortGrantBackend struct{ countingBackend }

func (b *shortGrantBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	g.Validity = 150 * time.Millisecond
	return g, err
}

// A lock obtained while the watchdog is between two rounds — here while an observer told of
// another lock's loss is still running — must be renewed like any other, and its context must
// end by itself if it ever is not.
func TestWatchdogRenewsLockObtainedDuringTick(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	rdb := singleClient(t)
	inObserver, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	observe := func(e fencelock.Event) {
		if e.Kind == fencelock.EventLost && strings.HasSuffix(e.Name, ":expiring") {
			once.Do(func() {
				close(inObserver)
				select { // a slow log sink, say
				case <-proceed:
				case <-time.After(5 * time.Second):
				}
			})
		}
	}
	c, other := newLocker(t, rdb, fencelock.WithObserver(observe)), newLocker(t, rdb)
	name := lockName(t)
	// A lock without the watchdog runs out while no one looks at it.
	if _, err := c.Obtain(ctx, name+":expiring", fencelock.WithTTL(100*time.Millisecond), fencelock.WithWatchdog(false)); err != nil {
		t.Fatal(err)
	}
	<-inObserver
	const ttl = 600 * time.Millisecond
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl))
	close(proceed)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	select {
	case <-lock.Context().Done():
		t.Fatalf("lost: %v", context.Cause(lock.Context()))
	case <-time.After(4 * ttl):
	}
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client got a lock the watchdog should have kept (holder's Valid() = %v): %v", lock.Valid(), err)
	}
}

// A Client that takes one short lock after another leaves its watchdog asleep. Its loop often
// scans between two locks (here always: it runs after each release, as it would while a
// store's reply is on its way); with no hold left it planned to sleep an hour, so the next
// hold, due an interval after its grant, woke it again: a wake-up and a scan per cycle.
func TestWatchdogSleepsThroughOneLockAfterAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		c := fencelock.New(memorybackend.New().Backend())
		defer c.Close()
		const cycles = 100
		for i := range cycles {
			l, err := c.TryObtain(ctx, "one-after-another-"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the loop scans now, if anything woke it
		}
		if n := fencelock.WatchdogScans(c); n > 2 {
			t.Fatalf("the watchdog scanned %d times in %d cycles of TryObtain and Release, with no time passing; want at most 2", n, cycles)
		}
	})
}
