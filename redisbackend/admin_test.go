package redisbackend_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
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

// Close is final: every call after it fails with an error matching fencelock.ErrClosed, and
// none reaches the server.
func TestCloseIsFinal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	req := fencelock.Request{Name: "closed", Owner: "o", TTL: time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]error{}
	_, calls["Acquire"] = b.Acquire(ctx, req)
	_, calls["AcquireQueued"] = b.AcquireQueued(ctx, req)
	calls["Renew"] = b.Renew(ctx, []fencelock.Lease{{Name: "closed", Owner: "o", TTL: time.Second}})[0].Err
	_, calls["Release"] = b.Release(ctx, fencelock.Lease{Name: "closed", Owner: "o", TTL: time.Second}, "")
	_, calls["Inspect"] = b.Inspect(ctx, "closed")
	_, calls["List"] = fencelock.List(ctx, b, "")
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
