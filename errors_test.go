package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// context.Cause of a lock's context is the lock's own story: nil while it is held, and the loss
// once lost — never the cause of the context given to Obtain, whose end does not end the lock.
func TestLockContextCauseIsTheLoss(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	c := newLocker(t, rdb)
	name := lockName(t)
	request, finish := context.WithCancelCause(ctx)
	lock, err := c.Obtain(request, name, fencelock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	finish(errors.New("HTTP request finished"))
	if err := context.Cause(lock.Context()); err != nil {
		t.Fatalf("context.Cause of a held lock's context = %v", err)
	}
	if err := rdb.Del(ctx, b.Key(name)).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the loss never ended the context")
	}
	if cause := context.Cause(lock.Context()); !errors.Is(cause, fencelock.ErrLost) {
		t.Fatalf("context.Cause after the loss = %v, want an error matching ErrLost", cause)
	}
}

// A lock's context is made at its first use; a lock that ended before then gives a context
// that has ended already, with that end as its cause: a loss, or the release.
func TestLockContextMadeAfterTheEnd(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	c := newLocker(t, rdb)
	name := lockName(t)
	lost := make(chan error, 1)
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(300*time.Millisecond), fencelock.WithOnLost(func(_ string, err error) { lost <- err }))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key(name)).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("the loss was never told")
	}
	lctx := lock.Context()
	select {
	case <-lctx.Done():
	default:
		t.Fatal("the context of a lock lost before its first use has not ended")
	}
	if err, cause := lctx.Err(), context.Cause(lctx); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, context.Canceled) || !errors.Is(cause, fencelock.ErrLost) {
		t.Fatalf("the context of a lock lost before its first use: Err %v, Cause %v; want the loss (ErrLost, context.Canceled)", err, cause)
	}

	released, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := released.Context().Err(); !errors.Is(err, fencelock.ErrNotHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the context of a lock released before its first use: %v; want ErrNotHeld and context.Canceled", err)
	}
}

// Error texts are one line, for line-based logs, and still match every sentinel they stand for.
func TestErrorsAreOneLine(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	c, other := newLocker(t, rdb), newLocker(t, rdb)
	name := lockName(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = other.Obtain(short, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error spans lines: %q", err.Error())
	}
	cancelled, cancel2 := context.WithCancel(ctx)
	cancel2()
	_, err = other.Obtain(cancelled, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("cancelled context: got %q", err)
	}
}

// An acquisition whose reply was lost is undone; when the undo fails too, the observer hears of
// it (the lock then waits out its TTL in the store).
func TestFailedCleanupIsObserved(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	faulty := &lostReplies{Client: singleClient(t)}
	var mu sync.Mutex
	var events []fencelock.Event
	c := fencelock.New(redisbackend.New(faulty), fencelock.WithCleanupTimeout(300*time.Millisecond), fencelock.WithObserver(func(e fencelock.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	defer c.Close()
	faulty.drop.Store(1 << 20) // the acquire's reply, and those of every try of the undo
	if _, err := c.TryObtain(ctx, lockName(t), fencelock.WithTTL(time.Minute)); err == nil {
		t.Fatal("TryObtain succeeded though its reply was lost")
	}
	waitFor(t, 5*time.Second, "no event told of the failed undo", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == fencelock.EventCleanup && e.Err != nil {
				return true
			}
		}
		return false
	})
}

// WithReplicas reports a WAIT that failed as that failure, not as replicas that did not answer.
func TestReplicaWaitErrorIsReported(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	master := testserver.StartRedis(t, "--repl-diskless-sync-delay", "0")
	// A writable replica takes the script's writes, and refuses WAIT.
	replica := testserver.StartRedis(t, "--replicaof", "127.0.0.1", strings.TrimPrefix(master.Addr, "127.0.0.1:"), "--replica-read-only", "no")
	// Synced first: the first sync replaces the replica's dataset, and would take the lock away.
	m := master.ClientT(t)
	waitFor(t, 10*time.Second, "the replica never acknowledged a write", func() bool {
		return m.Set(ctx, "sync-probe", "1", 0).Err() == nil && m.Wait(ctx, 1, 100*time.Millisecond).Val() == 1
	})
	c := fencelock.New(redisbackend.New(replica.ClientT(t), redisbackend.WithReplicas(1, 100*time.Millisecond)))
	defer c.Close()
	name := lockName(t)
	_, err := c.TryObtain(ctx, name, fencelock.WithTTL(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "WAIT") || !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("got %v, want the WAIT error, matching ErrInvalid", err)
	}
	// The script took the lock before WAIT was refused: the Client undoes it.
	waitFor(t, 5*time.Second, "the lock the script took before the refused WAIT is still held", func() bool {
		info, err := c.Inspect(ctx, name)
		return err == nil && !info.Held
	})
}
