package fencelock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// deadlineSlack is how long past its context's deadline a call may return: the README's
// figure, with room for the race detector on a small machine.
const deadlineSlack = 100 * time.Millisecond

// returnsBy fails the test when call, made with a context that ends after d, takes longer
// than d plus the slack. A call that does not return at all is reported after 10 s.
func returnsBy(t *testing.T, d time.Duration, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		if took := time.Since(start); took > d+deadlineSlack {
			t.Errorf("returned after %v with a %v deadline (%v)", took.Round(time.Millisecond), d, err)
		}
	case <-time.After(d + 10*time.Second):
		t.Errorf("had not returned %v after its %v deadline", 10*time.Second, d)
	}
}

// Every call returns by its context's deadline plus a small slack, whatever the store does:
// refuses connections, stops answering, or holds a renewal back. Clean-up that must outlive
// the deadline runs in the background.
func TestCallsReturnByDeadline(t *testing.T) {
	const d = 200 * time.Millisecond
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	refused := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = refused.Close() })
	stopped := testserver.StartRedis(t)
	silent := redis.NewClient(&redis.Options{Addr: stopped.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = silent.Close() })
	if err := silent.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		rdb    *redis.Client
		obtain func(c *fencelock.Client, ctx context.Context, name string, opts ...fencelock.Option) (*fencelock.Lock, error)
	}{
		{"TryObtain refused", refused, (*fencelock.Client).TryObtain},
		{"Obtain refused", refused, (*fencelock.Client).Obtain},
		{"TryObtain stopped server", silent, (*fencelock.Client).TryObtain},
		{"Obtain stopped server", silent, (*fencelock.Client).Obtain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newLocker(t, tc.rdb)
			if tc.rdb == silent {
				if err := stopped.Pause(); err != nil {
					t.Fatal(err)
				}
				defer stopped.Resume()
			}
			returnsBy(t, d, func(ctx context.Context) error {
				_, err := tc.obtain(c, ctx, lockName(t))
				return err
			})
		})
	}

	t.Run("Release with a renewal in flight", func(t *testing.T) {
		slow := &heldRenewals{Backend: redisbackend.New(singleClient(t)), entered: make(chan struct{}, 1), gate: make(chan struct{})}
		c := fencelock.New(slow)
		defer c.Close()
		defer close(slow.gate) // before Close, which waits for the held renewal
		lock, err := c.Obtain(context.Background(), lockName(t), fencelock.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		<-slow.entered
		returnsBy(t, d, lock.Release)
	})

	t.Run("Refresh with a renewal in flight", func(t *testing.T) {
		slow := &heldRenewals{Backend: redisbackend.New(singleClient(t)), entered: make(chan struct{}, 1), gate: make(chan struct{})}
		c := fencelock.New(slow)
		defer c.Close()
		lock, err := c.Obtain(context.Background(), lockName(t), fencelock.WithTTL(3*time.Second), fencelock.WithRenewInterval(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(context.Background())
		defer close(slow.gate) // before Release and Close, which wait for the held renewal
		<-slow.entered
		returnsBy(t, d, func(ctx context.Context) error { return lock.Refresh(ctx, 0) })
	})

	t.Run("Release stopped server", func(t *testing.T) {
		c := newLocker(t, silent)
		lock, err := c.Obtain(context.Background(), lockName(t), fencelock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := stopped.Pause(); err != nil {
			t.Fatal(err)
		}
		defer stopped.Resume()
		returnsBy(t, d, lock.Release)
	})
}

// Do and Lead return by their context's deadline when the store stops answering while fn
// runs: the release after fn is bounded, and what it could not finish goes on in the
// background. It ran under context.WithoutCancel with no deadline, and waited for the store
// (etcd's client waits for a connection for ever; go-redis for its read timeout, three times).
func TestDoAndLeadReturnByDeadline(t *testing.T) {
	const d = 300 * time.Millisecond
	stopped := testserver.StartRedis(t)
	silent := redis.NewClient(&redis.Options{Addr: stopped.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = silent.Close() })
	// fn stops the store and works until its context ends, as a worker does.
	fn := func(ctx context.Context) error {
		if err := stopped.Pause(); err != nil {
			t.Error(err)
		}
		<-ctx.Done()
		return nil
	}
	for _, tc := range []struct {
		name string
		call func(c *fencelock.Client, ctx context.Context, name string) error
	}{
		{"Do", func(c *fencelock.Client, ctx context.Context, name string) error {
			return c.Do(ctx, name, fn, fencelock.WithTTL(5*time.Second))
		}},
		{"Semaphore.Do", func(c *fencelock.Client, ctx context.Context, name string) error {
			return c.Semaphore(name, 2).Do(ctx, fn, fencelock.WithTTL(5*time.Second))
		}},
		{"Lead", func(c *fencelock.Client, ctx context.Context, name string) error {
			return c.Election(name, fencelock.WithTTL(5*time.Second)).Lead(ctx, "v", func(ctx context.Context, _ int64) error { return fn(ctx) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newLocker(t, silent)
			defer stopped.Resume()
			returnsBy(t, d, func(ctx context.Context) error { return tc.call(c, ctx, lockName(t)) })
		})
	}
}
