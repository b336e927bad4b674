package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

func TestListAndForceRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range []string{"single", "cluster"} {
		t.Run(d, func(t *testing.T) {
			var b *redisbackend.Backend
			if d == "single" {
				b = redisbackend.New(testserver.StartRedis(t).ClientT(t))
			} else {
				b = redisbackend.New(testserver.StartCluster(t, 3).ClientT(t))
			}
			c := fencelock.New(b)
			defer c.Close()
			var held []*fencelock.Lock
			for _, name := range []string{"job:a", "job:b", "job:c*", "other"} {
				l, err := c.Obtain(ctx, name, fencelock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			infos, err := fencelock.List(ctx, b, "job:")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, i := range infos {
				names = append(names, i.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"job:a", "job:b", "job:c*"}) {
				t.Fatalf("List(job:) = %v", names)
			}

			info, err := b.ForceRelease(ctx, "job:a")
			if err != nil || !info.Held || info.Owner != held[0].Owner() {
				t.Fatalf("force release: %+v %v", info, err)
			}
			select {
			case <-held[0].Context().Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the holder of a force-released lock was not told")
			}
			if err := held[0].Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
				t.Fatalf("release after force release: %v", err)
			}
			if info, err := b.ForceRelease(ctx, "job:a"); err != nil || info.Held {
				t.Fatalf("force release of a free lock: %+v %v", info, err)
			}
			for _, l := range held[1:] {
				_ = l.Release(ctx)
			}
		})
	}
}

// ListSemaphores on a Cluster finds the semaphores on every master, and not their locks.
func TestListSemaphoresCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartCluster(t, 3).ClientT(t)
	b := redisbackend.New(rdb)
	c := fencelock.New(b)
	defer c.Close()
	var want []string
	for i := range 8 {
		name := fmt.Sprintf("pool:%d", i)
		p, err := c.Semaphore(name, 2).Acquire(ctx, fencelock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		want = append(want, name)
	}
	lock, err := c.Obtain(ctx, "pool:lock", fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	var mu sync.Mutex
	masters := 0 // the masters that keep some of the semaphores
	err = rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if n > 0 {
			mu.Lock()
			masters++
			mu.Unlock()
		}
		return err
	})
	if err != nil || masters < 2 {
		t.Fatalf("the semaphores are kept on %d masters (%v); the test wants names on several", masters, err)
	}
	sems, err := fencelock.ListSemaphores(ctx, b, "pool:")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sems {
		if len(s.Permits) != 1 || s.Limit != 2 {
			t.Errorf("%s: %+v, want one permit of 2", s.Name, s)
		}
		got = append(got, s.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListSemaphores(pool:) = %q, want %q", got, want)
	}
}

// A semaphore whose last permit expired while a waiter is in line is listed, with its waiter:
// the permits' keys go with the permit, and the waiter takes it only at its next attempt. The
// waiter's connection is held up so that its next attempt does not come before the listing.
func TestListSemaphoresWaiterAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := testserver.StartRedis(t)
	rdb := r.ClientT(t)
	b := redisbackend.New(rdb)
	proxy := testserver.StartProxy(t, r.Addr)
	far := fencelock.New(redisbackend.New(redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})))
	defer far.Close()
	// A holder that died: nothing renews its permit.
	if _, err := b.Acquire(ctx, driver.Request{Name: "line", Owner: "dead", Hold: "1", TTL: time.Second, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	waited := make(chan error, 1)
	go func() {
		p, err := far.Semaphore("line", 1).Acquire(wctx, fencelock.WithTTL(10*time.Second))
		if err == nil {
			err = p.Release(ctx)
		}
		waited <- err
	}()
	waitUntil(t, "the waiter in line", func() bool {
		info, err := b.InspectSemaphore(ctx, "line")
		return err == nil && info.Waiting == 1
	})
	proxy.Blackhole() // its place in line lives 5s after its last attempt
	defer proxy.Restore()
	waitUntil(t, "the dead holder's permit to expire", func() bool {
		return rdb.Exists(ctx, b.Key("line")+":s").Val() == 0
	})
	sems, err := fencelock.ListSemaphores(ctx, b, "")
	if err != nil || len(sems) != 1 || sems[0].Name != "line" || sems[0].Waiting != 1 || len(sems[0].Permits) != 0 {
		t.Fatalf("ListSemaphores with one waiter and no permit held = %+v, %v", sems, err)
	}
	proxy.Restore()
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

// waitUntil is testserver.WaitFor with the bound of this package's tests.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.WaitFor(t, 10*time.Second, what, cond)
}

// Close is final: every call after it fails with an error matching fencelock.ErrClosed, and
// none reaches the server.
func TestCloseIsFinal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	req := driver.Request{Name: "closed", Owner: "o", TTL: time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]error{}
	_, calls["Acquire"] = b.Acquire(ctx, req)
	_, calls["AcquireQueued"] = b.AcquireQueued(ctx, req)
	calls["Renew"] = b.Renew(ctx, []driver.Lease{{Name: "closed", Owner: "o", TTL: time.Second}})[0].Err
	_, calls["Release"] = b.Release(ctx, driver.Lease{Name: "closed", Owner: "o", TTL: time.Second}, "")
	_, calls["Inspect"] = b.Inspect(ctx, "closed")
	_, calls["List"] = fencelock.List(ctx, b, "")
	_, calls["ListSemaphores"] = fencelock.ListSemaphores(ctx, b, "")
	_, _, calls["WatchRelease"] = b.WatchRelease(ctx, "closed")
	for name, err := range calls {
		if !errors.Is(err, fencelock.ErrClosed) {
			t.Errorf("%s after Close: %v, want an error matching ErrClosed", name, err)
		}
	}
	if pttl := rdb.PTTL(ctx, b.Key("closed")).Val(); pttl <= 0 || pttl > time.Second {
		t.Errorf("a call after Close reached the server: PTTL %v", pttl)
	}
}
