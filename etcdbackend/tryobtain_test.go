package etcdbackend_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// A single attempt on a held lock writes nothing. It used to join the queue and leave again:
// had the holder released in between, its key stood at the head until deleted, and attempts
// by others in that window were told the lock was held when no one held it (found by the
// safety suite's linearizability check).
func TestTryObtainOnHeldLockWritesNothing(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, cli := newBackend(t, etcd)
	lock, err := newLocker(t, b).Obtain(ctx, "try-held")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	w, _ := newBackend(t, etcd)
	other := newLocker(t, w)
	for range 3 {
		before, err := cli.Get(ctx, "probe")
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.TryObtain(ctx, "try-held")
		if !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("TryObtain on a held lock: %v", err)
		}
		after, err := cli.Get(ctx, "probe")
		if err != nil {
			t.Fatal(err)
		}
		if after.Header.Revision != before.Header.Revision {
			t.Fatalf("a failed attempt moved the revision from %d to %d: it wrote", before.Header.Revision, after.Header.Revision)
		}
	}
}
