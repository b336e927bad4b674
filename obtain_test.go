package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
)

func TestTryObtainFailsWhileHeld(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxTimeout(t, 10*time.Second)
		a, b := newLocker(t, rdb), newLocker(t, rdb)
		name := lockName(t)

		lock, err := a.TryObtain(ctx, name, fencelock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.TryObtain(ctx, name)
		if !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("second TryObtain: got %v, want ErrNotObtained", err)
		}
		var held *fencelock.HeldError
		if !errors.As(err, &held) || held.Remaining <= 0 || held.Remaining > 5*time.Second {
			t.Fatalf("want a HeldError with the holder's remaining TTL, got %#v", err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lock2, err := b.TryObtain(ctx, name)
		if err != nil {
			t.Fatalf("TryObtain after release: %v", err)
		}
		if lock2.Token() <= lock.Token() {
			t.Fatalf("token %d after %d: not increasing", lock2.Token(), lock.Token())
		}
		if err := lock2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestObtainContextEndJoinsBothErrors(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newLocker(t, singleClient(t))
	name := lockName(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)

	other := newLocker(t, singleClient(t))
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err = other.Obtain(short, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}

	cancelled, cancel2 := context.WithCancel(ctx)
	cancel2()
	_, err = other.Obtain(cancelled, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: got %v", err)
	}
}

func TestWaitTimeout(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newLocker(t, singleClient(t))
	name := lockName(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	_, err = c.Obtain(ctx, name, fencelock.WithWaitTimeout(100*time.Millisecond))
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the wait timeout must not end the caller's context")
	}
	_, err = c.Obtain(ctx, name, fencelock.WithWaitTimeout(0))
	var held *fencelock.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("a zero wait timeout is one attempt: got %v", err)
	}
}

// A waiter must wake on the release, not on the holder's TTL: with a 30s TTL and a 5s
// context, only a release notification can get it the lock in time.
func TestObtainWakesOnRelease(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxTimeout(t, 20*time.Second)
		holder, waiter := newLocker(t, rdb), newLocker(t, rdb)
		name := lockName(t)
		lock, err := holder.Obtain(ctx, name, fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l, err := waiter.Obtain(wctx, name)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitListening(t, rdb, name)
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	})
}

// Many waiters on one lock, each taking it in turn: none is lost, none holds it together with
// another.
func TestWaitersTakeTurns(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	rdb := singleClient(t)
	name := lockName(t)
	const workers, rounds = 8, 10
	var inside, total int32
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		c := newLocker(t, rdb)
		go func() {
			for r := 0; r < rounds; r++ {
				err := c.Do(ctx, name, func(ctx context.Context) error {
					if n := addInt32(&inside, 1); n != 1 {
						return errors.New("two holders at once")
					}
					time.Sleep(time.Millisecond)
					addInt32(&total, 1)
					addInt32(&inside, -1)
					return nil
				}, fencelock.WithTTL(5*time.Second))
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if total != workers*rounds {
		t.Fatalf("%d critical sections ran, want %d", total, workers*rounds)
	}
}

func TestDo(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	c := newLocker(t, rdb)
	name := lockName(t)
	var token int64
	err := c.Do(ctx, name, func(lctx context.Context) error {
		if err := lctx.Err(); err != nil {
			return err
		}
		info, err := c.Inspect(ctx, name)
		if err != nil {
			return err
		}
		if !info.Held {
			return errors.New("lock not held inside Do")
		}
		token = info.Token
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if token <= 0 {
		t.Fatalf("token %d", token)
	}
	if info, _ := c.Inspect(ctx, name); info.Held {
		t.Fatal("lock still held after Do returned")
	}

	boom := errors.New("boom")
	if err := c.Do(ctx, name, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if info, _ := c.Inspect(ctx, name); info.Held {
		t.Fatal("lock still held after a failing fn")
	}
	if err := c.Do(ctx, name, nil); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("nil fn: %v", err)
	}
}

// Do's function stops when the caller's context ends.
func TestDoFollowsCallerContext(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	c := newLocker(t, singleClient(t))
	short, cancel := context.WithCancel(ctx)
	err := c.Do(short, lockName(t), func(lctx context.Context) error {
		cancel()
		select {
		case <-lctx.Done():
			return lctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("fn's context did not end with the caller's")
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// All waiters of one client share one subscription connection.
func TestWaitersShareOneSubscription(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	rdb := singleClient(t)
	holder, waiter := newLocker(t, rdb), newLocker(t, rdb)
	const n = 5
	locks := make([]*fencelock.Lock, n)
	for i := range locks {
		// Without the watchdog, whose loss watch would open a subscription of its own.
		l, err := holder.Obtain(ctx, lockName(t, string(rune('a'+i))), fencelock.WithWatchdog(false))
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = l
	}
	// The IDs of the server's pub/sub connections: a count would take one that a test before
	// this one left closing, and that closed meanwhile, for one fewer opened.
	pubsubConns := func() map[string]bool {
		list := rdb.ClientList(ctx).Val() // one line per connection; flags P mark pub/sub
		ids := map[string]bool{}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " flags=P ") {
				id, _, _ := strings.Cut(line, " ")
				ids[id] = true
			}
		}
		return ids
	}
	baseline := pubsubConns()
	opened := func() int { // pub/sub connections open now that were not at the baseline
		n := 0
		for id := range pubsubConns() {
			if !baseline[id] {
				n++
			}
		}
		return n
	}
	got := make(chan error, n)
	for i := range locks {
		go func() {
			l, err := waiter.Obtain(ctx, locks[i].Name())
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
	}
	for _, l := range locks {
		waitListening(t, rdb, l.Name())
	}
	if extra := opened(); extra != 1 {
		t.Fatalf("%d waiters opened %d subscription connections, want 1", n, extra)
	}
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range locks {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "the subscription to close after the last waiter", func() bool { return opened() == 0 })
}

func TestRetryStrategies(t *testing.T) {
	if d := fencelock.LinearBackoff(5 * time.Millisecond).NextBackoff(); d != 5*time.Millisecond {
		t.Fatalf("linear: %v", d)
	}
	if d := fencelock.NoRetry().NextBackoff(); d != 0 {
		t.Fatalf("no retry: %v", d)
	}
	exp := fencelock.ExponentialBackoff(time.Millisecond, 8*time.Millisecond)
	var seq []time.Duration
	for i := 0; i < 6; i++ {
		seq = append(seq, exp.NextBackoff())
	}
	want := []time.Duration{1, 2, 4, 8, 8, 8}
	for i := range want {
		if seq[i] != want[i]*time.Millisecond {
			t.Fatalf("exponential: %v", seq)
		}
	}
	lim := fencelock.LimitRetry(fencelock.LinearBackoff(time.Millisecond), 2)
	if first, second, third := lim.NextBackoff(), lim.NextBackoff(), lim.NextBackoff(); first == 0 || second == 0 || third != 0 {
		t.Fatal("limit 2 must allow two retries, then stop")
	}
	jit := fencelock.WithJitter(fencelock.LinearBackoff(100*time.Millisecond), 0.5)
	for i := 0; i < 100; i++ {
		if d := jit.NextBackoff(); d < 50*time.Millisecond || d > 150*time.Millisecond {
			t.Fatalf("jitter out of range: %v", d)
		}
	}
}

// With a retry strategy, Obtain polls, and gives up when the strategy does.
func TestObtainWithRetryStrategy(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	holder, poller := newLocker(t, rdb), newLocker(t, rdb)
	name := lockName(t)
	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	_, err = poller.Obtain(ctx, name, fencelock.WithRetry(fencelock.LimitRetry(fencelock.LinearBackoff(5*time.Millisecond), 3)))
	if !errors.Is(err, fencelock.ErrNotObtained) || ctx.Err() != nil {
		t.Fatalf("a limited strategy must give up with ErrNotObtained: %v", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = lock.Release(ctx)
	}()
	l, err := poller.Obtain(ctx, name, fencelock.WithRetry(fencelock.LinearBackoff(5*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}
