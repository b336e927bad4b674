package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// plant writes the lock name as a plain key (lock.lua), as a client that writes that form
// would: owner holds it with the one hold hold, under token, for ttl; the fence counter is at
// token.
func plant(t *testing.T, ctx context.Context, rdb *redis.Client, b *redisbackend.Backend, name, owner, hold string, token int64, ttl time.Duration) {
	t.Helper()
	must(t, rdb.Set(ctx, b.Key(name)+":fence", token, time.Minute).Err())
	must(t, rdb.Set(ctx, b.Key(name), fmt.Sprintf("%d %s %s", token, hold, owner), ttl).Err())
}

// keyType is the type of the lock key of name: "string" for a plain key, "hash", "none".
func keyType(t *testing.T, ctx context.Context, rdb *redis.Client, b *redisbackend.Backend, name string) string {
	t.Helper()
	ty, err := rdb.Type(ctx, b.Key(name)).Result()
	must(t, err)
	return ty
}

// Every call reads a lock kept as a plain key, one holder's one hold with no metadata and no
// line, as the lock it is, and turns it into the hash where the lock needs one: re-entry,
// metadata, a waiter in line.
func TestPlainLockIsALock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	defer b.Close()
	const owner, hold, token = "owner one", "h1", int64(1_000_000_000_000_000)
	lease := driver.Lease{Owner: owner, Token: token, TTL: 20 * time.Second}
	setup := func(t *testing.T) (string, driver.Lease) {
		name := strings.ReplaceAll(t.Name(), "/", ":")
		plant(t, ctx, rdb, b, name, owner, hold, token, 10*time.Second)
		l := lease
		l.Name = name
		return name, l
	}

	t.Run("inspect", func(t *testing.T) {
		name, _ := setup(t)
		info, err := b.Inspect(ctx, name)
		if err != nil || !info.Held || info.Owner != owner || info.Token != token || info.Count != 1 || info.Remaining <= 0 || info.Remaining > 10*time.Second || info.Meta != "" {
			t.Fatalf("Inspect of a plain lock: %+v, %v", info, err)
		}
	})
	t.Run("held", func(t *testing.T) {
		name, _ := setup(t)
		_, err := b.Acquire(ctx, driver.Request{Name: name, Owner: "other", Hold: "x", TTL: time.Second})
		if held, ok := errors.AsType[*driver.HeldError](err); !ok || held.Remaining <= 0 {
			t.Fatalf("another owner's Acquire of a plain lock: %v, want a *HeldError with the time left", err)
		}
	})
	t.Run("renew", func(t *testing.T) {
		name, l := setup(t)
		if err := b.Renew(ctx, []driver.Lease{l})[0].Err; err != nil {
			t.Fatal(err)
		}
		if pttl := rdb.PTTL(ctx, b.Key(name)).Val(); pttl <= 10*time.Second || keyType(t, ctx, rdb, b, name) != "string" {
			t.Fatalf("after a renewal for 20s: PTTL %v, a %s key; want over 10s, still plain", pttl, keyType(t, ctx, rdb, b, name))
		}
		l.Token++
		if err := b.Renew(ctx, []driver.Lease{l})[0].Err; !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("a renewal under another token: %v, want ErrNotHeld", err)
		}
	})
	t.Run("release", func(t *testing.T) {
		name, l := setup(t)
		if n, err := b.Release(ctx, l, "another hold"); err != nil || n != 1 || keyType(t, ctx, rdb, b, name) != "string" {
			t.Fatalf("the release of a hold the lock does not have: %d, %v; want the count, 1, and the lock kept", n, err)
		}
		if n, err := b.Release(ctx, l, hold); err != nil || n != 0 || keyType(t, ctx, rdb, b, name) != "none" {
			t.Fatalf("the release of the plain lock's hold: %d, %v, a %s key; want 0 and the key gone", n, err, keyType(t, ctx, rdb, b, name))
		}
	})
	t.Run("reenter", func(t *testing.T) {
		name, l := setup(t)
		g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, Hold: "h2", TTL: time.Second})
		if err != nil || g.Token != token || g.Count != 2 || keyType(t, ctx, rdb, b, name) != "hash" {
			t.Fatalf("re-entry of a plain lock: %+v, %v, a %s key; want token %d, count 2, a hash", g, err, keyType(t, ctx, rdb, b, name), token)
		}
		if pttl := rdb.PTTL(ctx, b.Key(name)).Val(); pttl <= 5*time.Second {
			t.Fatalf("re-entry for 1s cut the lock's 10s to %v", pttl)
		}
		for i, h := range []string{"h2", hold} {
			if n, err := b.Release(ctx, l, h); err != nil || n != 1-i {
				t.Fatalf("release of %s: %d, %v; want %d", h, n, err, 1-i)
			}
		}
	})
	t.Run("publish", func(t *testing.T) {
		name, l := setup(t)
		if err := b.Publish(ctx, l, "meta"); err != nil {
			t.Fatal(err)
		}
		if info, err := b.Inspect(ctx, name); err != nil || info.Meta != "meta" || info.Owner != owner || info.Token != token || info.Count != 1 || info.Remaining <= 5*time.Second {
			t.Fatalf("after Publish: %+v, %v", info, err)
		}
	})
	t.Run("force", func(t *testing.T) {
		name, _ := setup(t)
		if info, err := b.ForceRelease(ctx, name); err != nil || info.Owner != owner || keyType(t, ctx, rdb, b, name) != "none" {
			t.Fatalf("ForceRelease of a plain lock: %+v, %v, a %s key", info, err, keyType(t, ctx, rdb, b, name))
		}
	})
	t.Run("line", func(t *testing.T) {
		name, l := setup(t)
		granted := make(chan driver.Grant, 1)
		errs := make(chan error, 1)
		go func() {
			g, err := b.AcquireQueued(ctx, driver.Request{Name: name, Owner: "waiter", Hold: "w", TTL: time.Second, Waiting: func() {}})
			if err != nil {
				errs <- err
				return
			}
			granted <- g
		}()
		waitUntil(t, "the waiter in the plain lock's line", func() bool {
			line, err := b.Line(ctx, name)
			return err == nil && len(line) == 1
		})
		if ty := keyType(t, ctx, rdb, b, name); ty != "hash" {
			t.Fatalf("a plain lock with a waiter in line is a %s key, want the hash that tells the release of the line", ty)
		}
		if n, err := b.Release(ctx, l, hold); err != nil || n != 0 {
			t.Fatalf("release: %d, %v", n, err)
		}
		select {
		case g := <-granted:
			if g.Token <= token {
				t.Fatalf("the waiter's token %d, not above the plain lock's %d", g.Token, token)
			}
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("the release of a plain lock did not hand it to the waiter in line")
		}
	})
}

// The usual cycle — a fresh name, no line, one hold, released — stays on the scripts' short
// paths: the server runs, per cycle, two scripts and in them EXISTS, TIME, SET … GET and SET
// (acquire.lua, take.lua), then GET, DEL and PUBSUB NUMSUB (release.lua, announce.lua), and
// nothing else (INFO commandstats counts the commands scripts call).
func TestUsualCycleTakesTheShortPaths(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb, redisbackend.WithLossWatch(false))
	defer b.Close()
	c := fencelock.New(b)
	defer c.Close()
	const cycles = 100
	// A first cycle loads the scripts (EVAL after NOSCRIPT).
	l, err := c.TryObtain(ctx, "usual")
	must(t, err)
	must(t, l.Release(ctx))
	must(t, rdb.ConfigResetStat(ctx).Err())
	for i := range cycles {
		l, err := c.TryObtain(ctx, fmt.Sprintf("usual-%d", i))
		must(t, err)
		must(t, l.Release(ctx))
	}
	got, err := testserver.AllCommandCalls(ctx, rdb)
	must(t, err)
	delete(got, "info")
	delete(got, "config|resetstat")
	want := map[string]int{"evalsha": 2 * cycles, "exists": cycles, "time": cycles, "set": 2 * cycles, "get": cycles, "del": cycles, "pubsub|numsub": cycles}
	if !maps.Equal(got, want) {
		t.Fatalf("commands of %d usual cycles: %v, want %v", cycles, got, want)
	}
}

// A hold ID with a space cannot be told from the owner in the plain form: a lock with such a
// hold is kept as the hash, and reads back as its owner's.
func TestHoldWithASpaceKeepsItsOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	defer b.Close()
	const name, owner, hold = "hold-with-a-space", "owner one", "first hold"
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, Hold: hold, TTL: 10 * time.Second})
	must(t, err)
	if info, err := b.Inspect(ctx, name); err != nil || info.Owner != owner || info.Count != 1 {
		t.Fatalf("Inspect of a lock taken with the hold %q: %+v, %v; want the owner %q", hold, info, err, owner)
	}
	lease := driver.Lease{Name: name, Owner: owner, Token: g.Token, TTL: 10 * time.Second}
	if n, err := b.Release(ctx, lease, hold); err != nil || n != 0 || keyType(t, ctx, rdb, b, name) != "none" {
		t.Fatalf("the release of that hold: %d, %v, a %s key; want 0 and the key gone", n, err, keyType(t, ctx, rdb, b, name))
	}
}

// A client whose scripts know only the hash (those before lock.lua, kept in testdata) fails on
// a plain key with the server's WRONGTYPE error: it never takes a lock another client keeps
// in the plain form, nor queues behind it.
func TestHashOnlyScriptsRefuseAPlainLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	defer b.Close()
	src := func(names ...string) string {
		var out strings.Builder
		for _, n := range names {
			s, err := os.ReadFile("testdata/hashonly/" + n + ".lua")
			must(t, err)
			out.Write(s)
		}
		return out.String()
	}
	const name = "plain-vs-hash-only"
	plant(t, ctx, rdb, b, name, "new", "h", 1_000_000_000_000_000, 10*time.Second)
	keys := []string{b.Key(name), b.Key(name) + ":fence", b.Key(name) + ":q", b.Key(name) + ":q:e"}
	for _, call := range []struct {
		what string
		src  string
		keys []string
		args []any
	}{
		{"acquire", src("take", "reenter", "acquire"), keys[:3], []any{"old", "h", 1000, 60000, ""}},
		{"queue", src("take", "reenter", "queue"), keys, []any{"old", "h", 1000, 60000, "", 5000, "client", 1000}},
		{"renew", src("renew"), keys[:1], []any{"new", 1000, "0", "0"}},
		{"release", src("announce", "take", "handover", "release"), keys, []any{"new", "h", "PUBLISH", 60000, "NUMSUB", "0"}},
	} {
		err := rdb.Eval(ctx, call.src, call.keys, call.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("the hash-only %s script on a plain lock: %v, want WRONGTYPE", call.what, err)
		}
	}
	if v := rdb.Get(ctx, b.Key(name)).Val(); v != "1000000000000000 h new" {
		t.Fatalf("the plain lock after the hash-only scripts: %q", v)
	}
}

// The loss watch reads a lock that changed form under its holder as the same lock, and a
// plain key's deletion as the loss it is.
func TestLossWatchReadsBothForms(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := testserver.StartRedis(t)
	rdb := srv.ClientT(t)
	b := redisbackend.New(srv.ClientT(t))
	c := fencelock.New(b)
	defer c.Close()
	defer b.Close()
	lock, err := c.TryObtain(ctx, "two-forms", fencelock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	awaitTrackedRead(t, ctx, rdb)
	// The same lock, as a plain key: the watch reads it again, first as a hash (WRONGTYPE),
	// then with GET, and finds it its holder's.
	must(t, rdb.Set(ctx, b.Key("two-forms"), fmt.Sprintf("%d  %s", lock.StoreToken(), lock.Owner()), 30*time.Second).Err())
	waitUntil(t, "the watch to read the plain key", func() bool {
		list, _ := rdb.ClientList(ctx).Result()
		return trackingRan(list, "get")
	})
	if err := lock.Valid(); err != nil {
		t.Fatalf("the lock, kept as a plain key of the same owner and token: %v", err)
	}
	must(t, rdb.Del(ctx, b.Key("two-forms")).Err())
	select {
	case <-lock.Context().Done():
	case <-ctx.Done():
		t.Fatal("the deletion of the plain key was never told")
	}
	if err := context.Cause(lock.Context()); !errors.Is(err, fencelock.ErrNotHeld) || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("cause %v: want the deletion the server told of", err)
	}
}

// A Backend made WithPlainLocks(false), as in a rolling upgrade from a version whose scripts
// know only the hash, writes no plain key — not at a grant, nor at a hand-over — so that a
// client of that version meets each of its locks as a lock held, and takes it when it is
// free, with a greater token. A Backend of the defaults writes the plain key.
func TestPlainLocksOffWritesOnlyHashes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	plainB := redisbackend.New(rdb)
	defer plainB.Close()
	hashB := redisbackend.New(rdb, redisbackend.WithPlainLocks(false))
	defer hashB.Close()
	old, err := os.ReadFile("testdata/hashonly/take.lua")
	must(t, err)
	for _, f := range []string{"reenter", "acquire"} {
		s, err := os.ReadFile("testdata/hashonly/" + f + ".lua")
		must(t, err)
		old = append(old, s...)
	}
	oldAcquire := func(name string) []any {
		t.Helper()
		k := hashB.Key(name)
		res, err := rdb.Eval(ctx, string(old), []string{k, k + ":fence", k + ":q"}, "old owner", "old hold", 1000, 60000, "").Slice()
		if err != nil {
			t.Fatalf("the hash-only acquire of %s: %v", name, err)
		}
		return res
	}

	c, plainC := fencelock.New(hashB), fencelock.New(plainB)
	defer c.Close()
	defer plainC.Close()
	l, err := plainC.TryObtain(ctx, "plain-default")
	must(t, err)
	if ty := keyType(t, ctx, rdb, plainB, "plain-default"); ty != "string" {
		t.Fatalf("a lock of a Backend of the defaults is a %s key, want the plain string", ty)
	}
	must(t, l.Release(ctx))

	holder, err := c.TryObtain(ctx, "hash-only", fencelock.WithTTL(10*time.Second))
	must(t, err)
	if ty := keyType(t, ctx, rdb, hashB, "hash-only"); ty != "hash" {
		t.Fatalf("a lock of a Backend WithPlainLocks(false) is a %s key, want the hash", ty)
	}
	if res := oldAcquire("hash-only"); res[0] != int64(0) {
		t.Fatalf("the hash-only acquire of a held lock: %v, want {0, pttl}", res)
	}
	// A hand-over to a waiter of the same Backend: the lock it hands over is a hash too.
	waited := make(chan *fencelock.Lock, 1)
	go func() {
		w, err := c.Obtain(ctx, "hash-only", fencelock.WithOwner("waiter"), fencelock.WithTTL(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		waited <- w
	}()
	waitUntil(t, "the waiter in line", func() bool {
		line, err := hashB.Line(ctx, "hash-only")
		return err == nil && len(line) == 1
	})
	must(t, holder.Release(ctx))
	w := <-waited
	if w == nil {
		t.FailNow()
	}
	if ty := keyType(t, ctx, rdb, hashB, "hash-only"); ty != "hash" {
		t.Fatalf("the lock handed over by a Backend WithPlainLocks(false) is a %s key, want the hash", ty)
	}
	if res := oldAcquire("hash-only"); res[0] != int64(0) {
		t.Fatalf("the hash-only acquire of the handed-over lock: %v, want {0, pttl}", res)
	}
	must(t, w.Release(ctx))
	if res := oldAcquire("hash-only"); res[0] != int64(1) || res[1].(int64) <= w.StoreToken() {
		t.Fatalf("the hash-only acquire of the free lock: %v, want {1, a token above %d, 1}", res, w.StoreToken())
	}
}
