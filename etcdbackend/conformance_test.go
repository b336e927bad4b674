package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/fencelocktest"
)

func TestConformance(t *testing.T) {
	admin, cli := newBackend(t, etcd)
	target := fencelocktest.Target{
		New: func(t *testing.T) fencelock.Backend {
			b, _ := newBackend(t, etcd)
			return b
		},
		TTL: 2 * time.Second,
		Drop: func(t *testing.T, name string) {
			ctx := context.Background()
			info, err := admin.Inspect(ctx, name)
			if err != nil || !info.Held {
				t.Fatalf("drop %q: %+v %v", name, info, err)
			}
			if _, err := cli.Delete(ctx, admin.Key(name, info.Owner)); err != nil {
				t.Fatal(err)
			}
		},
		DropPermit: func(t *testing.T, name, owner string) {
			if resp, err := cli.Delete(context.Background(), admin.PermitKey(name, owner)); err != nil || resp.Deleted != 1 {
				t.Fatalf("drop the permit of %q of %q: %v, %v", owner, name, resp, err)
			}
		},
	}
	fencelocktest.Run(t, target)
	t.Run("Semaphore", func(t *testing.T) { fencelocktest.RunSemaphore(t, target) })
	t.Run("Election", func(t *testing.T) { fencelocktest.RunElection(t, target) })
	t.Run("RWLock", func(t *testing.T) { fencelocktest.RunRWLock(t, target) })
	// The shortest lease is 2 s: 8 histories, two of them with expiries.
	t.Run("Model", func(t *testing.T) {
		fencelocktest.RunModel(t, target, fencelocktest.Model{Histories: 8, AtOnce: 4, TTL: 2 * time.Second, Semaphores: true, Elections: true,
			// A lock left to expire with the watchdog off stayed in etcd, on the Backend's
			// lease, until its holder's Release: a Client now releases a hold its deadline ended.
			Regressions: []uint64{104}})
	})
}

var _ = etcdbackend.New
