package memorybackend_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/memorybackend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The memory store passes every conformance suite the real backends pass, in real time.
func TestConformance(t *testing.T) {
	store := memorybackend.New()
	target := fencelocktest.Target{
		New: func(t *testing.T) fencelock.Backend {
			b := store.Backend()
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		TTL:        time.Second,
		Drop:       func(t *testing.T, name string) { store.Expire(name) },
		DropPermit: func(t *testing.T, name, owner string) { store.ExpirePermit(name, owner) },
	}
	fencelocktest.Run(t, target)
	t.Run("Semaphore", func(t *testing.T) { fencelocktest.RunSemaphore(t, target) })
	t.Run("Election", func(t *testing.T) { fencelocktest.RunElection(t, target) })
	t.Run("RWLock", func(t *testing.T) { fencelocktest.RunRWLock(t, target) })
}
