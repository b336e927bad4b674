package zkbackend_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// A caller refused for its limit leaves the line; when its link is cut as it sends the delete,
// its node stays there until its Backend can remove it, or its session ends. That node is no
// holder's and sets no limit: a caller that agrees with the permit held is granted, or waits
// for a permit, and is never refused in the name of the limit that was refused. It was refused
// with a *LimitError naming 3, the refused caller's limit, while the only permit held was of 2.
func TestRefusedCallersNodeSetsNoLimit(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	admin := dial(t, server.Addr, nil)
	a, ab := newClient(t)
	dir := ab.Path(name)
	held, err := a.Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The refused caller: its link is cut as its node's delete goes out, the first request that
	// names the node made in line (the create names only its stem, or, when it would make the
	// directory too, the node of sequence 0).
	var link zktest.Link
	rb := zkbackend.New(dialSession(t, server.Addr, link.Dial, longSession), zkbackend.WithSessionTimeout(longSession))
	t.Cleanup(func() { _ = rb.Close() })
	guid := zkbackend.NewGUID()
	stem := []byte("_p_" + guid + "-" + zkbackend.OwnerTag("refused") + "-3-1-")
	link.CutBefore(func(request []byte) bool {
		i := bytes.Index(request, stem)
		if i < 0 || len(request) < i+len(stem)+10 {
			return false
		}
		seq := request[i+len(stem) : i+len(stem)+10]
		return bytes.IndexFunc(seq, func(r rune) bool { return r < '0' || r > '9' }) < 0 && string(seq) != "0000000000"
	})
	_, err = rb.AcquireGUID(ctx, driver.Request{Name: name, Owner: "refused", Hold: "h", TTL: longSession, Limit: 3}, guid)
	var refused *fencelock.LimitError
	if !errors.As(err, &refused) || refused.Stored != 2 {
		t.Fatalf("a caller of limit 3 while a permit of 2 is held: %v, want a *LimitError naming 2", err)
	}
	if !slices.ContainsFunc(children(t, admin, dir), func(c string) bool { return strings.Contains(c, guid) }) {
		t.Fatal("the refused caller's node left the line: its delete got through before the cut")
	}

	c, _ := newClient(t)
	mine, err := c.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a caller of limit 2, the limit of the only permit held, with a refused caller's node of limit 3 in line: %v", err)
	}
	// Granted past it, the refused node must be gone: once the permits ahead of it were given
	// back, it would stand first in line and name the limit.
	if slices.ContainsFunc(children(t, admin, dir), func(c string) bool { return strings.Contains(c, guid) }) {
		t.Fatal("a caller was granted past the refused caller's node, which stays in line")
	}

	// A third caller of limit 2 waits for a permit, and gets the one given back.
	w, _ := newClient(t)
	got := takeBehind(t, func() (*fencelock.Lock, error) { return w.Semaphore(name, 2).Acquire(ctx) }, func() bool {
		return len(children(t, admin, dir)) == 3
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	third := <-got
	if third == nil {
		t.FailNow()
	}
	if _, err := c.Semaphore(name, 3).TryAcquire(ctx); !errors.As(err, &refused) || refused.Stored != 2 {
		t.Fatalf("a caller of limit 3 while permits of 2 are held: %v, want a *LimitError naming 2", err)
	}
	for _, l := range []*fencelock.Lock{mine, third} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// children returns the children of dir, none when it does not exist.
func children(t testing.TB, conn *zk.Conn, dir string) []string {
	t.Helper()
	c, _, err := conn.Children(dir)
	if err != nil && err != zk.ErrNoNode {
		t.Fatal(err)
	}
	return c
}
