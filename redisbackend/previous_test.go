package redisbackend_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// The scripts of the version before this one (testdata/plainv1: plain keys, every argument
// sent) and this version's, on one server, as in a rolling upgrade: the key layout is the
// same, so each refuses a lock the other holds, and a release of either hands the lock to a
// waiter of the other, with a greater token.
func TestPreviousScriptsShareLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	defer b.Close()
	c := fencelock.New(b)
	defer c.Close()
	src := func(names ...string) string {
		var out []byte
		for _, n := range names {
			s, err := os.ReadFile("testdata/plainv1/" + n + ".lua")
			must(t, err)
			out = append(out, s...)
		}
		return string(out)
	}
	oldAcquire := src("lock", "take", "reenter", "acquire")
	oldQueue := src("lock", "take", "reenter", "queue")
	oldRelease := src("announce", "lock", "take", "handover", "release")
	const name, oldOwner, oldHold, oldClient = "previous", "old owner", "h1", "old-client"
	k := b.Key(name)
	keys := []string{k, k + ":fence", k + ":q", k + ":q:e"}
	eval := func(what, src string, keys []string, args ...any) any {
		t.Helper()
		v, err := rdb.Eval(ctx, src, keys, args...).Result()
		if err != nil {
			t.Fatalf("the previous version's %s: %v", what, err)
		}
		return v
	}
	take := func() int64 {
		t.Helper()
		res, _ := eval("acquire", oldAcquire, keys[:3], oldOwner, oldHold, 10000, 60000, "", "").([]any)
		if len(res) != 3 || res[0] != int64(1) {
			t.Fatalf("the previous version's acquire of a free lock: %v, want {1, token, 1}", res)
		}
		return res[1].(int64)
	}
	release := func(token int64) int64 {
		t.Helper()
		n, _ := eval("release", oldRelease, keys, oldOwner, oldHold, "PUBLISH", 60000, "NUMSUB", token, "").(int64)
		return n
	}

	// The previous version holds: this one refuses, then takes the lock once it is released.
	oldToken := take()
	if _, err := c.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("TryObtain of a lock the previous version holds: %v, want ErrNotObtained", err)
	}
	if n := release(oldToken); n != 0 {
		t.Fatalf("the previous version's release of its lock: %d, want 0", n)
	}
	l, err := c.TryObtain(ctx, name)
	must(t, err)
	if l.StoreToken() <= oldToken {
		t.Fatalf("token %d after the previous version's %d", l.StoreToken(), oldToken)
	}
	// This version holds: the previous one refuses; its release is not the holder's.
	if res, _ := eval("acquire", oldAcquire, keys[:3], oldOwner, oldHold, 10000, 60000, "", "").([]any); len(res) != 2 || res[0] != int64(0) {
		t.Fatalf("the previous version's acquire of a lock this one holds: %v, want {0, pttl}", res)
	}
	if n := release(0); n != -1 {
		t.Fatalf("the previous version's release of a lock this one holds: %d, want -1", n)
	}

	// A waiter of the previous version in line behind this version's lock is handed it at
	// the release: the grant is published on its client's channel.
	grants := rdb.Subscribe(ctx, k+":g:"+oldClient)
	defer grants.Close()
	_, err = grants.Receive(ctx)
	must(t, err)
	if res, _ := eval("queue", oldQueue, keys, oldOwner, oldHold, 10000, 60000, "", 5000, oldClient, 10000, "").([]any); len(res) != 3 || res[0] != int64(0) {
		t.Fatalf("the previous version's queue behind a lock this one holds: %v, want {0, pttl, last}", res)
	}
	must(t, l.Release(ctx))
	msg, err := grants.ReceiveMessage(ctx)
	must(t, err)
	info, err := b.Inspect(ctx, name)
	must(t, err)
	if info.Owner != oldOwner || info.Token <= l.StoreToken() {
		t.Fatalf("after this version's release to the previous version's waiter (told %q): %+v, want %q's lock with a token above %d", msg.Payload, info, oldOwner, l.StoreToken())
	}

	// And the other way: this version waits in line behind the previous version's lock.
	waited := make(chan *fencelock.Lock, 1)
	go func() {
		w, err := c.Obtain(ctx, name)
		if err != nil {
			t.Error(err)
		}
		waited <- w
	}()
	waitUntil(t, "this version's waiter in line", func() bool {
		line, err := b.Line(ctx, name)
		return err == nil && len(line) == 1
	})
	if n := release(info.Token); n != 0 {
		t.Fatalf("the previous version's release to this version's waiter: %d, want 0", n)
	}
	w := <-waited
	if w == nil {
		t.FailNow()
	}
	if w.StoreToken() <= info.Token {
		t.Fatalf("the waiter's token %d after the previous version's %d", w.StoreToken(), info.Token)
	}
	must(t, w.Release(ctx))
	if info, err := b.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("after the last release: %+v, %v; want the lock free", info, err)
	}
}
