package zkbackend_test

import (
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/zkbackend"
)

func TestConformance(t *testing.T) {
	admin := dial(t, server.Addr, nil)
	target := fencelocktest.Target{
		New: func(t *testing.T) fencelock.Backend {
			conn := dial(t, server.Addr, nil)
			b := sessionBackend{newBackend(conn), conn}
			// Before dial's clean-up closes the connection: the Backend's settler, which
			// makes removals owed by calls cut short, is gone when the test ends.
			t.Cleanup(func() { _ = b.Backend.Close() })
			return b
		},
		TTL:         sessionTimeout,
		NoRemaining: true,
		Drop: func(t *testing.T, name string) {
			dropHolder(t, admin, newBackend(admin).Path(name))
		},
		DropPermit: func(t *testing.T, name, owner string) {
			dir := newBackend(admin).Path(name)
			nodes := permitNodes(t, admin, dir, owner)
			for _, n := range nodes {
				if err := admin.Delete(dir+"/"+n, -1); err != nil {
					t.Fatal(err)
				}
			}
			if len(nodes) != 1 {
				t.Fatalf("drop the permit of %q of %q: %d nodes of that owner", owner, name, len(nodes))
			}
		},
	}
	fencelocktest.Run(t, target)
	t.Run("Semaphore", func(t *testing.T) { fencelocktest.RunSemaphore(t, target) })
	t.Run("Election", func(t *testing.T) { fencelocktest.RunElection(t, target) })
	t.Run("RWLock", func(t *testing.T) { fencelocktest.RunRWLock(t, target) })
	// No expiries: a node lives as long as its session, not its TTL (the README's backend table).
	t.Run("Model", func(t *testing.T) {
		fencelocktest.RunModel(t, target, fencelocktest.Model{Semaphores: true, Elections: true,
			// An owner's re-entry under another limit: refused here, entered by the model then.
			Regressions: []uint64{528639425}})
	})
}

// sessionBackend is a Backend that ends its session when it is closed, as a crashed process's
// session ends (a session is the TTL of what it holds): the suite's crashed holders close
// their Backend.
type sessionBackend struct {
	*zkbackend.Backend
	conn *zk.Conn
}

func (b sessionBackend) Close() error {
	err := b.Backend.Close()
	b.conn.Close()
	return err
}
