package etcdbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
)

// With a prefix that does not end in a slash, the metadata keys still stay out of every
// lock's queue. They used to sit in the queue of a lock named ".meta": that lock looked held,
// and Inspect of it failed on keys it could not read.
func TestPrefixWithoutSlash(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd, etcdbackend.WithPrefix("/noslash"))
	c := newLocker(t, b)
	x, err := c.Obtain(ctx, "x", fencelock.WithMetadata("host=a"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release(ctx)
	m, err := c.TryObtain(ctx, ".meta")
	if err != nil {
		t.Fatalf("TryObtain(.meta) while only x is held: %v", err)
	}
	defer m.Release(ctx)
	if info, err := c.Inspect(ctx, ".meta"); err != nil || info.Owner != m.Owner() {
		t.Fatalf("Inspect(.meta): %+v %v", info, err)
	}
	infos, err := fencelock.List(ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, i := range infos {
		got[i.Name] = i.Meta
	}
	if len(got) != 2 || got["x"] != "host=a" || got[".meta"] != "" {
		t.Fatalf("List: %+v", infos)
	}
}

// List finds a lock whose owner ID contains a slash. It used to take the name for everything
// before the key's last slash, and missed the lock.
func TestListOwnerWithSlash(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd)
	const name, owner = "slash-owner/x", "team/worker-1"
	lock, err := newLocker(t, b).Obtain(ctx, name, fencelock.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	infos, err := fencelock.List(ctx, b, "slash-owner/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != name || infos[0].Owner != owner || !infos[0].Held {
		t.Fatalf("List(slash-owner/) = %+v", infos)
	}
}

// SemaphoreNames finds semaphores whose names have a slash or a percent sign and whose owner
// IDs have slashes, under a prefix that does not end in a slash; it finds no lock, and Names
// finds no semaphore.
func TestListSemaphoresEscaped(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, _ := newBackend(t, etcd, etcdbackend.WithPrefix("/semnames"))
	c := newLocker(t, b)
	slash, err := c.Semaphore("a/b", 2).Acquire(ctx, fencelock.WithOwner("team/worker-1"), fencelock.WithMetadata("host=a"))
	if err != nil {
		t.Fatal(err)
	}
	defer slash.Release(ctx)
	percent, err := c.Semaphore("a%2Fc", 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer percent.Release(ctx)
	lock, err := c.Obtain(ctx, "a/lock")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)

	sems, err := fencelock.ListSemaphores(ctx, b, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(sems) != 2 || sems[0].Name != "a%2Fc" || sems[1].Name != "a/b" {
		t.Fatalf("ListSemaphores(a) = %+v, want a%%2Fc and a/b", sems)
	}
	if p := sems[1].Permits; len(p) != 1 || p[0].Owner != "team/worker-1" || p[0].Token != slash.Token() || p[0].Meta != "host=a" {
		t.Fatalf("the permits of a/b: %+v, want team/worker-1's with its token and metadata", p)
	}
	if names, err := b.SemaphoreNames(ctx, "a/"); err != nil || len(names) != 1 || names[0] != "a/b" {
		t.Fatalf("SemaphoreNames(a/) = %q, %v; want a/b alone", names, err)
	}
	if locks, err := fencelock.List(ctx, b, ""); err != nil || len(locks) != 1 || locks[0].Name != "a/lock" {
		t.Fatalf("List = %+v, %v; want the lock a/lock alone", locks, err)
	}
	if err := slash.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if sems, err := fencelock.ListSemaphores(ctx, b, "a/"); err != nil || len(sems) != 0 {
		t.Fatalf("ListSemaphores(a/) after the release = %+v, %v", sems, err)
	}
}
