package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
)

// Releasing one hold of a reentrant lock when the transaction that rewrites the key's holds
// fails: the outcome is unknown, and the Backend finishes the release itself. The failed
// transaction's nil reply used to be read, and Release panicked.
func TestReleaseRewriteFails(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, f := newFaultyBackend(t, etcd)
	observer, _ := newBackend(t, etcd)
	const name = "release-rewrite-fails"
	lease := reentered(t, b, name)

	f.plan(pass, fail) // the release's read passes, its rewrite fails
	_, err := releaseNoPanic(t, b, planned(ctx), lease, "a")
	if !errors.Is(err, fencelock.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a release whose rewrite failed: %q, want one line matching ErrUnavailable", err)
	}
	waitCount(t, observer, name, 1)
}

// The Backend's settler retries an owed release; when the rewrite fails there too, it keeps
// the release for the next keep-alive. A panic there would end the user's process.
func TestSettlerRewriteFails(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, f := newFaultyBackend(t, etcd)
	observer, _ := newBackend(t, etcd)
	const name = "settler-rewrite-fails"
	lease := reentered(t, b, name)

	f.others(pass, pass, fail) // the settler's first try: its read passes, its rewrite fails
	f.plan(fail)               // the release itself never reaches etcd
	if _, err := b.Release(planned(ctx), lease, "a"); !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("a release that never reached etcd: %v", err)
	}
	waitCount(t, observer, name, 1)
}

// reentered makes the owner "owner" hold name twice, with holds "a" and "b".
func reentered(t *testing.T, b *etcdbackend.Backend, name string) driver.Lease {
	t.Helper()
	ctx := bounded(t, 10*time.Second)
	req := driver.Request{Name: name, Owner: "owner", Hold: "a", TTL: 2 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Hold = "b"
	if g, err := b.Acquire(ctx, req); err != nil || g.Count != 2 {
		t.Fatalf("reentrant acquisition: %+v %v", g, err)
	}
	return driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL}
}

func releaseNoPanic(t *testing.T, b *etcdbackend.Backend, ctx context.Context, lease driver.Lease, hold string) (n int, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Release panicked: %v", p)
		}
	}()
	return b.Release(ctx, lease, hold)
}

// waitCount waits until name is held with count holds, as observer sees it.
func waitCount(t *testing.T, observer *etcdbackend.Backend, name string, count int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := observer.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Held && info.Count == count {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: %+v after 10s, want %d holds", name, info, count)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A fresh lock that a second Client joined under its owner (WithOwner, through another
// Backend): the first holder's release sees the key changed since it was made, and takes out
// its own hold alone. The second holder keeps the lock; no third owner gets it until that one
// releases too.
func TestReleaseOfAFreshLockAnotherClientJoined(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	ba, cli := newBackend(t, etcd)
	bb, _ := newBackend(t, etcd)
	bc, _ := newBackend(t, etcd)
	const name = "release-fresh-joined"
	la, err := newLocker(t, ba).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := newLocker(t, bb).Obtain(ctx, name, fencelock.WithOwner(la.Owner()))
	if err != nil || lb.Token() != la.Token() {
		t.Fatalf("joining the fresh lock: token %d (want %d), %v", lb.Token(), la.Token(), err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("the first holder's release: %v", err)
	}
	resp, err := cli.Get(ctx, ba.Key(name, la.Owner()))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != la.Token() {
		t.Fatalf("after the first of two holds was released, etcd has %v (%v), want the key made at %d", resp.Kvs, err, la.Token())
	}
	third := newLocker(t, bc)
	if l, err := third.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a third owner while the joined hold is held: %v, %v", l, err)
	}
	if err := lb.Valid(); err != nil {
		t.Fatalf("the joined hold after the first holder released: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("the joined hold's release: %v", err)
	}
	l, err := third.TryObtain(ctx, name)
	if err != nil || l.Token() <= la.Token() {
		t.Fatalf("a third owner once both released: %v, %v", l, err)
	}
}

// The metadata a lock was obtained with goes with its release; a lock obtained without any
// leaves no key of it behind either.
func TestReleaseDeletesMetadata(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, cli := newBackend(t, etcd)
	c := newLocker(t, b)
	const name = "release-metadata"
	for _, meta := range []string{"host-a pid 7", ""} {
		var opts []fencelock.Option
		if meta != "" {
			opts = append(opts, fencelock.WithMetadata(meta))
		}
		l, err := c.Obtain(ctx, name, opts...)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Inspect(ctx, name)
		if err != nil || info.Meta != meta {
			t.Fatalf("metadata of the held lock: %q, %v, want %q", info.Meta, err, meta)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, "/fencelock/!meta/"+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Fatalf("after the release of a lock with metadata %q: %d metadata keys (%v)", meta, resp.Count, err)
		}
	}
}
