package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
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
func reentered(t *testing.T, b *etcdbackend.Backend, name string) fencelock.Lease {
	t.Helper()
	ctx := bounded(t, 10*time.Second)
	req := fencelock.Request{Name: name, Owner: "owner", Hold: "a", TTL: 2 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Hold = "b"
	if g, err := b.Acquire(ctx, req); err != nil || g.Count != 2 {
		t.Fatalf("reentrant acquisition: %+v %v", g, err)
	}
	return fencelock.Lease{Name: name, Owner: req.Owner, TTL: req.TTL}
}

func releaseNoPanic(t *testing.T, b *etcdbackend.Backend, ctx context.Context, lease fencelock.Lease, hold string) (n int, err error) {
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
