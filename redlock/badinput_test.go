package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// unhashable is a client wrapper that cannot be compared with ==.
type unhashable struct {
	*redis.Client
	tags []string
}

func TestBadConfiguration(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	cs := dial(t, addrs)
	var nilClient *redis.Client
	for _, tc := range []struct {
		what    string
		clients []redisbackend.Client
		opts    []redlock.Option
		says    string
	}{
		{"no nodes", nil, nil, "at least 3"},
		{"one node", cs[:1], nil, "at least 3"},
		{"two nodes", cs[:2], nil, "at least 3"},
		{"four nodes", cs[:4], nil, "odd number"},
		{"a nil client", []redisbackend.Client{cs[0], nil, cs[2]}, nil, "client 1 is nil"},
		{"a typed nil client", []redisbackend.Client{cs[0], cs[1], nilClient}, nil, "client 2 is nil"},
		{"the same client twice", []redisbackend.Client{cs[0], cs[1], cs[0]}, nil, "same client"},
		{"a brace in the prefix", cs[:3], []redlock.Option{redlock.WithPrefix("a{b")}, "brace"},
		{"no fence retention", cs[:3], []redlock.Option{redlock.WithFenceRetention(0)}, "retention"},
		{"a negative node timeout", cs[:3], []redlock.Option{redlock.WithNodeTimeout(-time.Second)}, "node timeout"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			b := newBackend(t, tc.clients, tc.opts...)
			_, err := b.Acquire(ctx, driver.Request{Name: "bad", Owner: "o", TTL: time.Second})
			if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Acquire: %v, want ErrInvalid saying %q", err, tc.says)
			}
			// Through a Client: refused at once, not retried.
			if _, err := newLocker(t, b).Obtain(ctx, "bad"); !errors.Is(err, fencelock.ErrInvalid) {
				t.Fatalf("Obtain: %v", err)
			}
			for _, r := range b.Renew(ctx, []driver.Lease{{Name: "bad", Owner: "o", TTL: time.Second}}) {
				if !errors.Is(r.Err, fencelock.ErrInvalid) {
					t.Fatalf("Renew: %v", r.Err)
				}
			}
			if _, err := b.Release(ctx, driver.Lease{Name: "bad", Owner: "o", TTL: time.Second}, ""); !errors.Is(err, fencelock.ErrInvalid) {
				t.Fatalf("Release: %v", err)
			}
			if _, err := b.Inspect(ctx, "bad"); !errors.Is(err, fencelock.ErrInvalid) {
				t.Fatalf("Inspect: %v", err)
			}
			if _, _, err := b.WatchRelease(ctx, "bad"); !errors.Is(err, fencelock.ErrInvalid) {
				t.Fatalf("WatchRelease: %v", err)
			}
		})
	}

	t.Run("incomparable clients", func(t *testing.T) {
		raw := []*redis.Client{cs[0].(*redis.Client), cs[1].(*redis.Client), cs[2].(*redis.Client)}
		b := newBackend(t, []redisbackend.Client{unhashable{raw[0], nil}, unhashable{raw[1], nil}, unhashable{raw[2], nil}})
		g, err := b.Acquire(ctx, driver.Request{Name: "incomparable", Owner: "o", TTL: time.Second})
		if err != nil || g.Token <= 0 {
			t.Fatalf("Acquire: %+v %v", g, err)
		}
		if _, err := b.Release(ctx, driver.Lease{Name: "incomparable", Owner: "o", TTL: time.Second}, ""); err != nil {
			t.Fatal(err)
		}
	})
}

// Two different clients to one server are caught at first use by the server's run_id.
func TestSameServerTwice(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b := newBackend(t, dial(t, []string{addrs[0], addrs[1], addrs[0]}))
	_, err := newLocker(t, b).Obtain(ctx, "same-server")
	if !errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "run_id") {
		t.Fatalf("Obtain over one server twice: %v, want ErrInvalid naming the run_id", err)
	}
	// And it stays refused, for every call.
	if _, err := b.Inspect(ctx, "same-server"); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("Inspect afterwards: %v", err)
	}
	if owners(dial(t, addrs[:1]), b.Key("same-server"))[0] != "" {
		t.Fatal("the refused acquisition left a key behind")
	}
}

func TestBadTTL(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		what string
		ttl  time.Duration
		opts []redlock.Option
	}{
		{"zero", 0, nil},
		{"negative", -time.Second, nil},
		{"fractional milliseconds", 1500 * time.Microsecond, nil},
		{"shorter than the node timeout and drift", 100 * time.Millisecond, []redlock.Option{redlock.WithNodeTimeout(98 * time.Millisecond)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			b := newBackend(t, dial(t, addrs), tc.opts...)
			if _, err := b.Acquire(ctx, driver.Request{Name: "bad-ttl", Owner: "o", TTL: tc.ttl}); !errors.Is(err, fencelock.ErrInvalid) {
				t.Fatalf("Acquire: %v, want ErrInvalid", err)
			}
			if r := b.Renew(ctx, []driver.Lease{{Name: "bad-ttl", Owner: "o", TTL: tc.ttl}}); !errors.Is(r[0].Err, fencelock.ErrInvalid) {
				t.Fatalf("Renew: %v, want ErrInvalid", r[0].Err)
			}
		})
	}
}

func TestClosedBackend(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b := redlock.New(dial(t, addrs))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if _, err := b.Acquire(ctx, driver.Request{Name: "closed", Owner: "o", TTL: time.Second}); !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if _, _, err := b.WatchRelease(ctx, "closed"); !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("WatchRelease after Close: %v", err)
	}
}

func TestContextEnds(t *testing.T) {
	b := newBackend(t, dial(t, addrs))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Acquire(ctx, driver.Request{Name: "ctx", Owner: "o", TTL: time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v", err)
	}
}
