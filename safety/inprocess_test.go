package safety

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Scenario 3: a write delayed in the network until 2×TTL after it was sent (Kleppmann's delayed
// packet). Meanwhile the sender's lock expired and another holder wrote. With fencing the late
// write is refused every time.
func TestDelayedWrite(t *testing.T) {
	t.Parallel() // asleep most of the time: it runs beside the other scenarios
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
		ttl  time.Duration
	}{
		{"redis", func(t *testing.T) string { return "redis://" + testserver.StartRedis(t).Addr }, 200 * time.Millisecond},
		{"etcd", startEtcd, time.Second}, // the test cluster's shortest lease
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			url := b.url(t)
			rounds := 5
			if full {
				rounds = 100
			}
			stale, refused := 0, 0
			for i := 0; i < rounds; i++ {
				var store fence.Memory
				name := "delayed-" + strconv.Itoa(i)
				a, stopA := newLocker(t, url)
				first, err := a.Obtain(ctx, name, fencelock.WithTTL(b.ttl), fencelock.WithWatchdog(false))
				if err != nil {
					t.Fatal(err)
				}
				late := first.Token() // the write leaves now, and arrives 2×TTL later
				if b.name == "etcd" {
					// An etcd lease lives while its keep-alive runs, whatever the watchdog
					// does: the sender's process is gone while its write is in flight.
					stopA()
				}
				time.Sleep(2 * b.ttl)
				bc, _ := newLocker(t, url)
				second, err := bc.Obtain(ctx, name, fencelock.WithTTL(b.ttl))
				if err != nil {
					t.Fatal(err)
				}
				if err := store.Check(name, second.Token()); err != nil {
					t.Fatal(err)
				}
				switch err := store.Check(name, late); {
				case err == nil:
					stale++
				case errors.Is(err, fence.ErrStale):
					refused++
				default:
					t.Fatal(err)
				}
				_ = second.Release(ctx)
			}
			t.Logf("%d rounds: %d late writes refused, %d accepted", rounds, refused, stale)
			record(outcome{Scenario: 3, Title: "write delayed 2×TTL", Backend: b.name, Setting: "fenced store",
				Rounds: rounds, Unit: "rounds", StaleRefused: refused, StaleAccepted: stale})
			if stale != 0 {
				t.Fatalf("%d stale writes accepted with fencing", stale)
			}
		})
	}
}

// Scenario 10: the lock's key deleted or the database flushed while held: the holder's context
// ends within one renewal interval plus a round trip.
func TestWatchdogReaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := testserver.StartRedis(t)
	rdb := r.ClientT(t)
	c, _ := newLocker(t, "redis://"+r.Addr)
	keys := redisbackend.New(rdb)
	const ttl = 300 * time.Millisecond
	trials := 20
	if full {
		trials = 1000
	}
	for _, fault := range []string{"DEL", "FLUSHALL"} {
		var delays []time.Duration
		for i := 0; i < trials; i++ {
			name := "reaction-" + strconv.Itoa(i)
			lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(i%7) * ttl / 21) // at varying points of the renewal interval
			start := time.Now()
			if fault == "DEL" {
				err = rdb.Del(ctx, keys.Key(name)).Err()
			} else {
				err = rdb.FlushAll(ctx).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lock.Context().Done():
			case <-time.After(ttl):
				// Past the TTL another client may hold the lock: whatever the timers did, a
				// holder that checks now must be told.
				if lock.Context().Err() == nil {
					t.Fatalf("%s: the lock still looks valid a TTL after the fault", fault)
				}
			}
			<-lock.Context().Done()
			delays = append(delays, time.Since(start))
			if !errors.Is(lock.Context().Err(), fencelock.ErrLost) {
				t.Fatalf("%s: %v", fault, lock.Context().Err())
			}
			_ = lock.Release(ctx)
		}
		slices.Sort(delays)
		p99, worst := delays[len(delays)*99/100], delays[len(delays)-1]
		t.Logf("%s: %d trials, loss noticed p50 %v p99 %v max %v (renewal interval %v)", fault, trials, delays[len(delays)/2], p99, worst, ttl/3)
		record(outcome{Scenario: 10, Title: "key lost while held: " + fault, Backend: "redis", Setting: fmt.Sprintf("TTL %v, renewal every %v", ttl, ttl/3),
			Rounds: trials, Unit: "trials", Note: fmt.Sprintf("context ended p50 %v, p99 %v after the fault", delays[len(delays)/2].Round(time.Millisecond), p99.Round(time.Millisecond))})
	}
}

func newLocker(t *testing.T, url string) (*fencelock.Client, func()) {
	b, closeBackend, err := openBackend(url)
	if err != nil {
		t.Fatal(err)
	}
	c := fencelock.New(b)
	var once sync.Once
	stop := func() { once.Do(func() { _ = c.Close(); closeBackend() }) }
	t.Cleanup(stop)
	return c, stop
}

// Scenario 10, second half: a holder that was away past its TTL never revives the lock under
// its old token — its renewal finds the key gone (or another owner's) and fails.
func TestNoRevivalAfterTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := testserver.StartRedis(t)
	rdb := r.ClientT(t)
	keys := redisbackend.New(rdb)
	c, _ := newLocker(t, "redis://"+r.Addr)
	other, _ := newLocker(t, "redis://"+r.Addr)
	const ttl = 200 * time.Millisecond
	revived := 0
	for i, successor := range []bool{false, true} {
		name := "revival-" + strconv.Itoa(i)
		lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl), fencelock.WithWatchdog(false))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl + 50*time.Millisecond) // away, as if paused
		var next *fencelock.Lock
		if successor {
			if next, err = other.Obtain(ctx, name, fencelock.WithTTL(10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if err := lock.Refresh(ctx, 10*time.Second); err == nil {
			revived++
			t.Errorf("a lock away past its TTL was renewed (successor: %v)", successor)
		}
		owner, _ := testserver.LockOwner(ctx, rdb, keys.Key(name))
		switch {
		case !successor && owner != "":
			t.Fatalf("the expired lock came back with owner %q", owner)
		case successor && owner != next.Owner():
			t.Fatalf("the successor's lock has owner %q after the old holder's renewal", owner)
		}
	}
	record(outcome{Scenario: 10, Title: "holder back after its TTL renews", Backend: "redis", Setting: "with and without a successor",
		Rounds: 2, Unit: "rounds", DoubleGrants: revived, Note: "renewal refused: the old token never comes back"})
}
