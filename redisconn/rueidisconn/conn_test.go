package rueidisconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/testmain"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisconn"
	"github.com/fencelock/fencelock/redisconn/redisconntest"
	"github.com/fencelock/fencelock/redisconn/rueidisconn"
	"github.com/fencelock/fencelock/redlock"
)

// exampleAddr is the address of the redis-server the examples run against.
var exampleAddr string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		r, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		exampleAddr = r.Addr
		return func() { _ = r.Close() }, nil
	})
}

func dial(t *testing.T, d redisconntest.Deployment) redisconn.Conn {
	// rueidis refuses to start without RESP3 unless told not to cache.
	opt := rueidis.ClientOption{InitAddress: d.Addrs, DisableCache: d.RESP2}
	if d.Kind == redisconntest.Sentinel {
		opt.Sentinel = rueidis.SentinelOption{MasterSet: d.MasterName}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return rueidisconn.New(client)
}

// The Conn does what redisconn promises, on every kind of deployment.
func TestConn(t *testing.T) { redisconntest.Run(t, dial) }

var del = redisconn.NewScript(`-- KEYS: the keys to delete
return redis.call('DEL', unpack(KEYS))
`)

// redisbackend on a rueidis client keeps every promise of a fencelock backend.
func TestBackendConformance(t *testing.T) {
	redisconntest.DeploymentsAtOnce(t, func(t *testing.T, d redisconntest.Deployment) {
		c := dial(t, d)
		target := fencelocktest.Target{
			New: func(t *testing.T) fencelock.Backend {
				// Closed with the test, so that no loss watch of its lingers into the next
				// test, or past the leak check at the end.
				b := redisbackend.New(c)
				t.Cleanup(func() { _ = b.Close() })
				return b
			},
			TTL: time.Second,
			Drop: func(t *testing.T, name string) {
				if _, err := c.Eval(context.Background(), del, []string{redisbackend.New(c).Key(name)}); err != nil {
					t.Fatal(err)
				}
			},
			// Every permit of the semaphore: the suite drops the only one.
			DropPermit: func(t *testing.T, name, _ string) {
				key := redisbackend.New(c).Key(name)
				if _, err := c.Eval(context.Background(), del, []string{key + ":s", key + ":s:x"}); err != nil {
					t.Fatal(err)
				}
			},
		}
		fencelocktest.Run(t, target)
		t.Run("Semaphore", func(t *testing.T) { fencelocktest.RunSemaphore(t, target) })
		t.Run("RWLock", func(t *testing.T) { fencelocktest.RunRWLock(t, target) })
	})
}

// Redlock runs on rueidis clients to independent nodes.
func TestRedlockConformance(t *testing.T) {
	var conns []redisconn.Client
	for range 3 {
		r := testserver.StartRedis(t)
		conns = append(conns, dial(t, redisconntest.Deployment{Kind: redisconntest.Single, Addrs: []string{r.Addr}}))
	}
	fencelocktest.Run(t, fencelocktest.Target{
		New: func(t *testing.T) fencelock.Backend {
			b := redlock.New(conns, redlock.WithNodeTimeout(200*time.Millisecond))
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		TTL: time.Second,
		Drop: func(t *testing.T, name string) {
			key := redlock.New(conns).Key(name)
			for _, c := range conns {
				if _, err := c.(redisconn.Conn).Eval(context.Background(), del, []string{key}); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}

// fence.Redis guards values on a rueidis client as on go-redis.
func TestFence(t *testing.T) {
	ctx := context.Background()
	r := testserver.StartRedis(t)
	g, err := fence.NewRedis(dial(t, redisconntest.Deployment{Kind: redisconntest.Single, Addrs: []string{r.Addr}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "stock", "9", 7); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "stock", "8", 6); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a stale token: got %v, want ErrStale", err)
	}
	if v, tok, err := g.Get(ctx, "stock"); err != nil || v != "9" || tok != 7 {
		t.Fatalf("Get: %q %d %v, want 9 7", v, tok, err)
	}
	if _, _, err := g.Get(ctx, "missing"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("a missing key: got %v, want ErrNotFound", err)
	}
}

// A TryObtain with WithReplicas returns by its deadline against a stopped server, on a client
// that has made no WAIT before: its first EvalWait must not dial a connection without the
// call's context (it took 5 s, rueidis's dial timeout, for a 300 ms deadline).
func TestTryObtainWithReplicasReturnsByDeadline(t *testing.T) {
	ctx := context.Background()
	r := testserver.StartRedis(t)
	c := dial(t, redisconntest.Deployment{Kind: redisconntest.Single, Addrs: []string{r.Addr}})
	if _, err := c.Eval(ctx, del, []string{"warm-up"}); err != nil {
		t.Fatal(err) // the client is connected while the server answers
	}
	locker := fencelock.New(redisbackend.New(c, redisbackend.WithReplicas(1, time.Second)))
	t.Cleanup(func() { _ = locker.Close() })
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	const deadline, slack = 300 * time.Millisecond, 100 * time.Millisecond // the README's slack
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := locker.TryObtain(ctx, "replicated")
		done <- err
	}()
	select {
	case err := <-done:
		if took := time.Since(start); took > deadline+slack {
			t.Errorf("TryObtain returned after %v with a %v deadline (%v)", took.Round(time.Millisecond), deadline, err)
		}
		if err == nil {
			t.Error("TryObtain obtained the lock from a stopped server")
		}
	case <-time.After(deadline + 10*time.Second):
		t.Errorf("TryObtain had not returned 10s after its %v deadline", deadline)
	}
}
