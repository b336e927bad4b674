package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Bad input gets a typed error, never a panic, and leaves no lock key behind without a TTL.
func TestBadInput(t *testing.T) {
	var nilCtx context.Context
	cases := []struct {
		name string
		// run makes the call under test; setup, if any, prepares the store first.
		setup func(t *testing.T, rdb *redis.Client, key string)
		run   func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error
		want  error // nil: the call must succeed
	}{
		{name: "empty name", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, _ string) error {
				return obtainWith(ctx, t, rdb, "")
			}},
		{name: "zero TTL", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(0))
			}},
		{name: "negative TTL", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(-time.Second))
			}},
		{name: "TTL below the minimum", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(5*time.Millisecond))
			}},
		{name: "TTL not whole milliseconds", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(1500*time.Microsecond+time.Second))
			}},
		{name: "TTL too short for the renewal interval", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(time.Second), fencelock.WithRenewInterval(600*time.Millisecond))
			}},
		{name: "negative wait timeout", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithWaitTimeout(-1))
			}},
		{name: "renewal interval of 1ns", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(time.Second), fencelock.WithRenewInterval(time.Nanosecond))
			}},
		{name: "renewal interval far below the TTL", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name, fencelock.WithTTL(time.Minute), fencelock.WithRenewInterval(time.Millisecond))
			}},
		{name: "zero cleanup timeout", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				c := fencelock.New(redisbackend.New(rdb), fencelock.WithCleanupTimeout(0))
				defer c.Close()
				_, err := c.TryObtain(ctx, name)
				return err
			}},
		{name: "negative cleanup timeout", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				c := fencelock.New(redisbackend.New(rdb), fencelock.WithCleanupTimeout(-time.Second))
				defer c.Close()
				_, err := c.TryObtain(ctx, name)
				return err
			}},
		{name: "replica wait below a millisecond", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				// WAIT n 0 would block forever.
				c := fencelock.New(redisbackend.New(rdb, redisbackend.WithReplicas(1, 500*time.Microsecond)))
				defer c.Close()
				_, err := c.TryObtain(ctx, name)
				return err
			}},
		{name: "nil context", want: fencelock.ErrInvalid,
			run: func(_ context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(nilCtx, t, rdb, name)
			}},
		{name: "nil backend", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, _ *redis.Client, name string) error {
				_, err := fencelock.New(nil).Obtain(ctx, name)
				return err
			}},
		{name: "nil redis client", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, _ *redis.Client, name string) error {
				c := fencelock.New(redisbackend.New(nil))
				defer c.Close()
				_, err := c.Obtain(ctx, name)
				return err
			}},
		{name: "typed nil redis client", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, _ *redis.Client, name string) error {
				var rc *redis.Client
				c := fencelock.New(redisbackend.New(rc))
				defer c.Close()
				_, err := c.Obtain(ctx, name)
				return err
			}},
		{name: "prefix with a brace", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				c := fencelock.New(redisbackend.New(rdb, redisbackend.WithPrefix("a{b")))
				defer c.Close()
				_, err := c.Obtain(ctx, name)
				return err
			}},
		{name: "lock key holds a string", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.Set(context.Background(), key, "not a lock", 0)
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name)
			}},
		{name: "lock key holds a list", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.RPush(context.Background(), key, "x")
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name)
			}},
		{name: "lock key holds a foreign hash", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.HSet(context.Background(), key, "field", "value")
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name)
			}},
		{name: "fence key holds a list", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.RPush(context.Background(), key+":fence", "x")
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name)
			}},
		{name: "fence key holds text", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.Set(context.Background(), key+":fence", "abc", 0)
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				return obtainWith(ctx, t, rdb, name)
			}},
		{name: "semaphore key holds a string", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.Set(context.Background(), key+":s:x", "not a semaphore", 0)
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				_, err := newLocker(t, rdb).Semaphore(name, 2).TryAcquire(ctx)
				return err
			}},
		{name: "semaphore permit fencelock did not write", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				ctx := context.Background()
				rdb.HSet(ctx, key+":s", "o:someone", "not a permit")
				rdb.ZAdd(ctx, key+":s:x", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "someone"})
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				_, err := newLocker(t, rdb).Semaphore(name, 2).TryAcquire(ctx, fencelock.WithOwner("someone"))
				if err != nil && !strings.Contains(err.Error(), "did not write") {
					t.Errorf("the error does not say what is wrong: %v", err)
				}
				return err
			}},
		{name: "semaphore of limit 0", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				_, err := newLocker(t, rdb).Semaphore(name, 0).Acquire(ctx)
				return err
			}},
		{name: "semaphore on a backend without semaphores", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				c := fencelock.New(struct{ fencelock.Backend }{redisbackend.New(rdb)})
				defer c.Close()
				_, err := c.Semaphore(name, 2).Acquire(ctx)
				if err != nil && !strings.Contains(err.Error(), "keeps no semaphores") {
					t.Errorf("the error does not say why: %v", err)
				}
				return err
			}},
		{name: "election with a nil client", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				var c *fencelock.Client
				if _, err := c.Election(name).Observe(ctx); !errors.Is(err, fencelock.ErrInvalid) {
					t.Errorf("Observe: %v", err)
				}
				_, err := c.Election(name).Campaign(ctx, "v")
				return err
			}},
		{name: "election value over MaxMetadata", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				_, err := newLocker(t, rdb).Election(name).Campaign(ctx, strings.Repeat("v", fencelock.MaxMetadata+1))
				return err
			}},
		{name: "NOSCRIPT after SCRIPT FLUSH reloads", want: nil,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.ScriptFlush(context.Background())
			},
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				c := newLocker(t, rdb)
				lock, err := c.Obtain(ctx, name)
				if err != nil {
					return err
				}
				rdb.ScriptFlush(ctx)
				if err := lock.Refresh(ctx, 0); err != nil {
					return err
				}
				rdb.ScriptFlush(ctx)
				return lock.Release(ctx)
			}},
		{name: "read-only replica", want: fencelock.ErrUnavailable,
			run: func(ctx context.Context, t *testing.T, _ *redis.Client, name string) error {
				master := testserver.StartRedis(t)
				replica := testserver.StartRedis(t, "--replicaof", "127.0.0.1", strings.TrimPrefix(master.Addr, "127.0.0.1:"))
				err := obtainWith(ctx, t, replica.ClientT(t), name)
				if err != nil && !strings.Contains(err.Error(), "read-only") {
					t.Errorf("the error does not say read-only: %v", err)
				}
				return err
			}},
		{name: "server gone", want: fencelock.ErrUnavailable,
			run: func(ctx context.Context, t *testing.T, _ *redis.Client, name string) error {
				r := testserver.StartRedis(t)
				rc := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
				defer rc.Close()
				c := newLocker(t, rc)
				lock, err := c.Obtain(ctx, name)
				if err != nil {
					return err
				}
				if err := r.Kill(); err != nil {
					t.Fatal(err)
				}
				if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrUnavailable) {
					t.Errorf("release on a dead server: %v", err)
				}
				_, err = c.TryObtain(ctx, name)
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 20*time.Second)
			rdb := singleClient(t)
			name := lockName(t)
			key := redisbackend.New(rdb).Key(name)
			if tc.setup != nil {
				tc.setup(t, rdb, key)
			}
			before := keyTTLs(t, rdb, key)
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = tc.run(ctx, t, rdb, name)
			}()
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("got %v, want success", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			for k, ttl := range keyTTLs(t, rdb, key) {
				if _, ok := before[k]; !ok && ttl < 0 {
					t.Errorf("key %s left without a TTL", k)
				}
				if k == key {
					if _, ok := before[k]; !ok {
						t.Errorf("lock key %s left behind", k)
					}
				}
			}
		})
	}
}

func obtainWith(ctx context.Context, t *testing.T, rdb redisbackend.Client, name string, opts ...fencelock.Option) error {
	c := newLocker(t, rdb)
	lock, err := c.TryObtain(ctx, name, opts...)
	if err == nil {
		return lock.Release(context.Background())
	}
	return err
}

// keyTTLs returns the keys of the lock's hash tag and their PTTL.
func keyTTLs(t *testing.T, rdb *redis.Client, key string) map[string]time.Duration {
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, key+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]time.Duration, len(keys))
	for _, k := range keys {
		out[k] = rdb.PTTL(ctx, k).Val()
	}
	return out
}
