package fencelock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Verify asks the store. With the loss watch off and the watchdog off, nothing else tells the
// holder that its lock's key was taken over by another owner: Verify does, and ends the lock.
// A permit is verified against its semaphore's permits. A store that does not answer leaves
// the lock as it was, with an error that says so, by ctx's deadline.
func TestVerify(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb, redisbackend.WithLossWatch(false))
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b)
	t.Cleanup(func() { _ = c.Close() })

	t.Run("taken over", func(t *testing.T) {
		name := lockName(t)
		lock, err := c.Obtain(ctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Verify(ctx); err != nil {
			t.Fatalf("Verify of a held lock: %v", err)
		}
		// Another owner's lock in its place, as after a failover to a replica that never saw it.
		if err := rdb.Del(ctx, b.Key(name)).Err(); err != nil {
			t.Fatal(err)
		}
		other, err := newLocker(t, rdb).TryObtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(ctx)
		if lock.Valid() != nil {
			t.Fatal("the holder learnt of the takeover without Verify")
		}
		err = lock.Verify(ctx)
		if !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrNotHeld) {
			t.Fatalf("Verify after a takeover: %v, want ErrLost and ErrNotHeld", err)
		}
		if !errors.Is(context.Cause(lock.Context()), fencelock.ErrLost) || lock.Valid() == nil {
			t.Fatal("Verify found the lock taken, and the lock goes on")
		}
		if err := other.Verify(ctx); err != nil {
			t.Fatalf("the new holder's Verify: %v", err)
		}
	})

	t.Run("permit", func(t *testing.T) {
		sem := c.Semaphore(lockName(t), 2)
		p, err := sem.Acquire(ctx, fencelock.WithWatchdog(false))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		if err := p.Verify(ctx); err != nil {
			t.Fatalf("Verify of a held permit: %v", err)
		}
	})

	t.Run("store silent", func(t *testing.T) {
		proxy := testserver.StartProxy(t, single.Addr)
		prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = prdb.Close() })
		pc := newLocker(t, prdb)
		lock, err := pc.Obtain(ctx, lockName(t), fencelock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		proxy.Blackhole()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = lock.Verify(short)
		cancel()
		proxy.Restore()
		if err == nil || errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("Verify with the store silent: %v, want the backend's error, not a loss", err)
		}
		if lock.Valid() != nil {
			t.Fatalf("a Verify without an answer ended the lock: %v", lock.Valid())
		}
		_ = lock.Release(ctx)
	})

	t.Run("released", func(t *testing.T) {
		lock, err := c.Obtain(ctx, lockName(t))
		if err != nil {
			t.Fatal(err)
		}
		_ = lock.Release(ctx)
		if err := lock.Verify(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
			t.Fatalf("Verify of a released lock: %v, want ErrNotHeld", err)
		}
		var nilLock *fencelock.Lock
		if err := nilLock.Verify(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
			t.Fatalf("Verify of a nil lock: %v, want ErrNotHeld", err)
		}
	})
}
