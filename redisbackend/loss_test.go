package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisconn"
)

// A holder learns by push that its lock's key changed under it — deleted, overwritten, flushed,
// lost to a restart — within seconds of a 30 s TTL whose first renewal is 10 s away: the
// loss's cause says the server told, and no renewal came before it.
func TestLossByPush(t *testing.T) {
	t.Parallel()
	type fault func(t *testing.T, ctx context.Context, srv *testserver.Redis, rdb *redis.Client, key string)
	cases := []struct {
		name  string
		fault fault
		says  string
	}{
		{"deleted", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.Del(ctx, key).Err())
		}, "deleted"},
		{"taken by another owner", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.Set(ctx, key, "1 h someone else", time.Minute).Err()) // a plain lock (lock.lua)
		}, "held by another lock"},
		{"taken by another owner, as a hash", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, key)
				p.HSet(ctx, key, "owner", "someone else", "token", 1, "count", 1)
				p.PExpire(ctx, key, time.Minute)
				return nil
			})
			must(t, err)
		}, "held by another lock"},
		{"overwritten with a string", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.Set(ctx, key, "x", time.Minute).Err())
		}, "overwritten"},
		{"flushed", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.FlushAll(ctx).Err())
		}, "deleted"},
		{"server restarted empty", func(t *testing.T, ctx context.Context, srv *testserver.Redis, _ *redis.Client, key string) {
			must(t, srv.Kill())
			must(t, srv.Restart())
		}, "deleted"},
		{"deleted after the watch's connections were killed", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
			must(t, rdb.ClientKillByFilter(ctx, "TYPE", "normal").Err())
			must(t, rdb.Del(ctx, key).Err())
		}, "deleted"},
		// The subscription lives on in these two: nothing but the tracking connection ends.
		{"deleted after the tracking connection alone was killed", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.ClientKillByFilter(ctx, "ID", trackingClient(t, ctx, rdb)).Err())
			must(t, rdb.Del(ctx, key).Err())
		}, "deleted"},
		{"deleted after the server's idle timeout closed the tracking connection", func(t *testing.T, ctx context.Context, _ *testserver.Redis, rdb *redis.Client, key string) {
			must(t, rdb.ConfigSet(ctx, "timeout", "2").Err()) // seconds; subscribers are spared
			time.Sleep(3500 * time.Millisecond)
			must(t, rdb.Del(ctx, key).Err())
		}, "deleted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartRedis(t, "--save", "", "--appendonly", "no")
			rdb := srv.ClientT(t)
			lossByPush(t, redisbackend.New(srv.ClientT(t)), rdb, func(ctx context.Context, key string) {
				tc.fault(t, ctx, srv, rdb, key)
			}, tc.says)
		})
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := testserver.StartCluster(t, 3)
		rdb := cl.ClientT(t)
		lossByPush(t, redisbackend.New(cl.ClientT(t)), rdb, func(ctx context.Context, key string) {
			must(t, rdb.Del(ctx, key).Err())
		}, "deleted")
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := testserver.StartSentinel(t)
		rdb := s.ClientT(t)
		lossByPush(t, redisbackend.New(s.ClientT(t)), rdb, func(ctx context.Context, key string) {
			must(t, rdb.Del(ctx, key).Err())
		}, "deleted")
	})
}

// awaitTrackedRead waits until a connection with tracking on has read a lock's key on a server
// of rdb (its last command an HMGET, or the PING of a quiet watch after it): from then on the
// server pushes word of a change of that key.
func awaitTrackedRead(t *testing.T, ctx context.Context, rdb redis.UniversalClient) {
	t.Helper()
	read := func(ctx context.Context, c *redis.Client) bool {
		list, _ := c.ClientList(ctx).Result()
		return trackingRan(list, "hmget", "ping")
	}
	waitUntil(t, "a connection with tracking on to read the lock's key", func() bool {
		var found atomic.Bool
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				if read(ctx, m) {
					found.Store(true)
				}
				return nil
			})
		case *redis.Client:
			found.Store(read(ctx, c))
		default:
			t.Fatalf("awaitTrackedRead: a %T", rdb)
		}
		return found.Load()
	})
}

// tracking reports whether fields, a line of CLIENT LIST, are a connection with tracking on
// whose last command is one of cmds, or any command when none are named.
func tracking(fields []string, cmds ...string) bool {
	return slices.ContainsFunc(fields, func(kv string) bool { return strings.HasPrefix(kv, "flags=") && strings.Contains(kv, "t") }) &&
		(len(cmds) == 0 || slices.ContainsFunc(cmds, func(cmd string) bool { return slices.Contains(fields, "cmd="+cmd) }))
}

// trackingRan reports whether list, the reply of CLIENT LIST, has a connection with tracking
// on whose last command is one of cmds.
func trackingRan(list string, cmds ...string) bool {
	for line := range strings.SplitSeq(list, "\n") {
		if tracking(strings.Fields(line), cmds...) {
			return true
		}
	}
	return false
}

// trackingClient returns the ID of the one client of the server with tracking on.
func trackingClient(t *testing.T, ctx context.Context, rdb *redis.Client) string {
	t.Helper()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if f := strings.Fields(line); tracking(f) {
			ids = append(ids, strings.TrimPrefix(f[0], "id="))
		}
	}
	if len(ids) != 1 {
		t.Fatalf("clients with tracking on: %v, in\n%s", ids, list)
	}
	return ids[0]
}

// lossByPush holds a lock past the moment its watch starts (on a server of rdb), runs fault,
// and wants the hold lost by push, its cause containing says.
func lossByPush(t *testing.T, b *redisbackend.Backend, rdb redis.UniversalClient, fault func(ctx context.Context, key string), says string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	observe, renewed := countRenewals()
	c := fencelock.New(b, observe)
	defer c.Close()
	defer b.Close()
	lock, err := c.TryObtain(ctx, "pushed", fencelock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	awaitTrackedRead(t, ctx, rdb) // the watch starts 10 ms into the hold
	start := time.Now()
	fault(ctx, b.Key("pushed"))
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told within 5 s: the loss waits for the renewal 10 s into the hold")
	}
	t.Logf("told %v after the fault", time.Since(start).Round(100*time.Microsecond))
	err = context.Cause(lock.Context())
	if !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrNotHeld) || !strings.Contains(err.Error(), "the server says") || !strings.Contains(err.Error(), says) {
		t.Fatalf("cause %v: want a loss the server told of (%q)", err, says)
	}
	if n := renewed.Load(); n != 0 {
		t.Fatalf("%d renewals before the loss: want the push to tell first", n)
	}
}

// A watched hold is not lost while the store keeps it: renewals, a second hold of the same
// owner through another Client, and other keys' changes each make the server push, and each
// read that follows finds the lock still the holder's.
func TestLossByPushKeepsAHeldLock(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	rdb := srv.ClientT(t)
	b := redisbackend.New(srv.ClientT(t))
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	observe, renewed := countRenewals()
	c1 := fencelock.New(b, observe)
	defer c1.Close()
	c2 := fencelock.New(b)
	defer c2.Close()
	opts := []fencelock.Option{fencelock.WithTTL(300 * time.Millisecond), fencelock.WithOwner("one-owner")}
	l1, err := c1.TryObtain(ctx, "kept", opts...)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c2.TryObtain(ctx, "kept", opts...)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c1.TryObtain(ctx, "kept-other", opts...)
	if err != nil {
		t.Fatal(err)
	}
	must(t, other.Release(ctx))
	must(t, rdb.Set(ctx, "unrelated", "x", time.Minute).Err())
	select {
	case <-l1.Context().Done():
		t.Fatalf("lost: %v", context.Cause(l1.Context()))
	case <-l2.Context().Done():
		t.Fatalf("lost: %v", context.Cause(l2.Context()))
	case <-time.After(1500 * time.Millisecond):
	}
	if renewed.Load() < 5 {
		t.Fatalf("%d renewals in 1.5 s of a 300 ms TTL: want the watchdog to have run", renewed.Load())
	}
	must(t, l2.Release(ctx))
	must(t, l1.Release(ctx))
}

// countRenewals is an observer that counts the watchdog's confirmed renewals.
func countRenewals() (fencelock.ClientOption, *atomic.Int32) {
	n := new(atomic.Int32)
	return fencelock.WithObserver(func(e fencelock.Event) {
		if e.Kind == fencelock.EventRenewed {
			n.Add(1)
		}
	}), n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A user the server does not let run CLIENT gets no loss watch, and nothing else changes: the
// watch gives up at once (NOPERM), and the holder learns of a DEL at its next renewal.
func TestLossByPushRefusedFallsBackToRenewals(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	admin := srv.ClientT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, admin.Do(ctx, "ACL", "SETUSER", "noclient", "on", ">pw", "~*", "&*", "+@all", "-client").Err())
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noclient", Password: "pw", ContextTimeoutEnabled: true})
	defer user.Close()
	b := redisbackend.New(user)
	defer b.Close()
	c := fencelock.New(b)
	defer c.Close()
	lock, err := c.TryObtain(ctx, "refused", fencelock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// The watch tries to start 10 ms into the hold, and the server refuses its CLIENT commands.
	waitUntil(t, "the server to refuse the watch's CLIENT command", func() bool {
		n, _ := testserver.RejectedCalls(ctx, admin, "client|id", "client|tracking")
		return n > 0
	})
	must(t, admin.Del(ctx, b.Key("refused")).Err())
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told at its renewal")
	}
	if err := context.Cause(lock.Context()); !errors.Is(err, fencelock.ErrNotHeld) || strings.Contains(err.Error(), "the server says") {
		t.Fatalf("cause %v: want the renewal's word, the watch having given up", err)
	}
	if got := admin.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Val(); strings.Contains(fmt.Sprint(got), "user=noclient") {
		t.Fatalf("a subscription of the refused user is still open: %v", got)
	}
}

// A Backend on a Conn that cannot track (such as the rueidis and valkey-go adapters) watches
// nothing and starts no goroutine for it. One that did, for a watch stopped before it first
// ran, lingered 2 s, past the leak check of a test binary that had not closed its Backend.
func TestLossWatchOnAConnThatCannotTrackStartsNothing(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	conn, err := redisconn.Of(srv.ClientT(t))
	if err != nil {
		t.Fatal(err)
	}
	b := redisbackend.New(untracked{conn})
	defer b.Close()
	stop := b.WatchLoss(driver.Lease{Name: "untracked", Owner: "o", TTL: time.Second, Token: 1}, func(error) {})
	defer stop()
	if b.LossWatchRunning() {
		t.Fatal("a loss watch goroutine runs for a Conn that cannot track")
	}
}

// untracked is a Conn without the Tracker of the go-redis Conn it wraps.
type untracked struct{ redisconn.Conn }
