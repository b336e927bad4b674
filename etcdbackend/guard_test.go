package etcdbackend_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
)

// Guard compares the key's create revision with the token the store issued: a Client made
// WithTokenBase hands out the revision plus its base, which no key's revision equals, and a
// guard built from that refused every write of the holder.
func TestGuardUnderATokenBase(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, cli := newBackend(t, etcd)
	c := fencelock.New(b, fencelock.WithTokenBase(1<<50), fencelock.WithDefaults(fencelock.WithTTL(2*time.Second)))
	t.Cleanup(func() { _ = c.Close() })
	lock, err := c.Obtain(ctx, "guard-base")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	if lock.Token() < 1<<50 {
		t.Fatalf("token %d, want the base added", lock.Token())
	}
	resp, err := cli.Txn(ctx).If(b.Guard(lock)).Then(clientv3.OpPut("/data/guard-base", "v")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("the holder's guarded write under a token base: succeeded=%v, %v", resp != nil && resp.Succeeded, err)
	}
}
