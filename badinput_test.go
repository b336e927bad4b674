package fencelock_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/fencelocktest"
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
		{name: "lock key holds a plain lock without a TTL", want: fencelock.ErrInvalid,
			setup: func(t *testing.T, rdb *redis.Client, key string) {
				rdb.Set(context.Background(), key, "1 hold someone", 0) // a lock always has a TTL
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
		{name: "list on a backend without names", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				_, err := fencelock.List(ctx, struct{ fencelock.Backend }{redisbackend.New(rdb)}, "")
				return err
			}},
		{name: "semaphores listed without semaphores", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				_, err := fencelock.ListSemaphores(ctx, struct{ fencelock.Backend }{redisbackend.New(rdb)}, "")
				return err
			}},
		{name: "semaphores listed without names", want: fencelock.ErrInvalid,
			run: func(ctx context.Context, t *testing.T, rdb *redis.Client, name string) error {
				b := redisbackend.New(rdb)
				unnamed := struct {
					fencelock.Backend
					driver.Semaphores
				}{b, b}
				_, err := fencelock.New(unnamed).ListSemaphores(ctx, "")
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
			checkText(t, tc.name, name, err)
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

// badInputTexts are the texts of TestBadInput's errors, as a user reads them: one line, what
// went wrong and what to do, no internal type. {name} stands for the case's lock name, {port}
// for a server's port. Changing one is changing the library's voice: read it as a new user.
var badInputTexts = map[string]string{
	"empty name":                                "fencelock: invalid argument: empty lock name",
	"zero TTL":                                  "fencelock: invalid argument: TTL must be positive, got 0s",
	"negative TTL":                              "fencelock: invalid argument: TTL must be positive, got -1s",
	"TTL below the minimum":                     "fencelock: invalid argument: TTL 5ms is shorter than the minimum 10ms",
	"TTL not whole milliseconds":                "fencelock: invalid argument: TTL 1.0015s is not a whole number of milliseconds",
	"TTL too short for the renewal interval":    "fencelock: invalid argument: renewal interval 600ms is too long for TTL 1s: at most 494ms leaves room for one retry",
	"negative wait timeout":                     "fencelock: invalid argument: wait timeout must not be negative, got -1ns",
	"renewal interval of 1ns":                   "fencelock: invalid argument: renewal interval 1ns is too short for TTL 1s: at least 10ms",
	"renewal interval far below the TTL":        "fencelock: invalid argument: renewal interval 1ms is too short for TTL 1m0s: at least 600ms",
	"zero cleanup timeout":                      "fencelock: invalid argument: cleanup timeout 0s: want more than 0 and at most 10m0s",
	"negative cleanup timeout":                  "fencelock: invalid argument: cleanup timeout -1s: want more than 0 and at most 10m0s",
	"replica wait below a millisecond":          "fencelock: invalid argument: replicas 1 with timeout 500µs: want a timeout of 1ms or more",
	"nil context":                               "fencelock: invalid argument: nil context",
	"nil backend":                               "fencelock: invalid argument: nil client or backend",
	"nil redis client":                          "fencelock: invalid argument: nil redis client",
	"typed nil redis client":                    "fencelock: invalid argument: nil redis client",
	"prefix with a brace":                       "fencelock: invalid argument: key prefix \"a{b\" contains a brace, which would break the hash tag",
	"lock key holds a string":                   "fencelock: invalid argument: the lock key holds a string that fencelock did not write: delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"lock key holds a plain lock without a TTL": "fencelock: invalid argument: the lock key holds a string that fencelock did not write: delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"lock key holds a list":                     "fencelock: invalid argument: a key of the lock holds another Redis type (WRONGTYPE Operation against a key holding the wrong kind of value): delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"lock key holds a foreign hash":             "fencelock: invalid argument: the lock key holds a hash that fencelock did not write: delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"fence key holds a list":                    "fencelock: invalid argument: a key of the lock holds another Redis type (WRONGTYPE Operation against a key holding the wrong kind of value): delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"fence key holds text":                      "fencelock: invalid argument: the fence key holds a value fencelock did not write: delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"semaphore key holds a string":              "fencelock: invalid argument: a key of the lock holds another Redis type (WRONGTYPE Operation against a key holding the wrong kind of value): delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"semaphore permit fencelock did not write":  "fencelock: invalid argument: the semaphore key holds a permit that fencelock did not write: delete it, or give the Backend a key prefix of its own (WithPrefix)",
	"semaphore of limit 0":                      "fencelock: invalid argument: semaphore \"{name}\": limit 0: want 1 or more",
	"semaphore on a backend without semaphores": "fencelock: invalid argument: this backend keeps no semaphores (Redis, etcd and ZooKeeper do; it does not implement driver.Semaphores)",
	"list on a backend without names":           "fencelock: invalid argument: this backend cannot list its locks (it does not implement driver.Namer)",
	"semaphores listed without semaphores":      "fencelock: invalid argument: this backend keeps no semaphores (Redis, etcd and ZooKeeper do; it does not implement driver.Semaphores)",
	"semaphores listed without names":           "fencelock: invalid argument: this backend cannot list its semaphores (it does not implement driver.SemaphoreNamer)",
	"election with a nil client":                "fencelock: invalid argument: nil client or backend",
	"election value over MaxMetadata":           "fencelock: invalid argument: metadata of 1025 bytes is longer than the maximum 1024",
	"read-only replica":                         "fencelock: backend unavailable: the server is a read-only replica: READONLY You can't write against a read only replica.",
	"server gone":                               "fencelock: backend unavailable: dial tcp 127.0.0.1:{port}: connect: connection refused",
}

// checkText holds err's text to badInputTexts, and every text to one line and no internals.
func checkText(t *testing.T, cas, name string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	text := err.Error()
	if strings.Contains(text, "\n") || fencelocktest.ShowsInternals(text) {
		t.Errorf("the error's text spans lines or shows internals: %q", text)
	}
	want, ok := badInputTexts[cas]
	if !ok {
		t.Errorf("no text pinned for %q; it reads %q", cas, text)
		return
	}
	pattern := regexp.QuoteMeta(strings.ReplaceAll(want, "{name}", name))
	pattern = strings.ReplaceAll(pattern, regexp.QuoteMeta("{port}"), `\d+`)
	if !regexp.MustCompile("^" + pattern + "$").MatchString(text) {
		t.Errorf("error text\n got: %s\nwant: %s", text, want)
	}
}
