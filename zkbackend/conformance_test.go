package zkbackend_test

import (
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

func TestConformance(t *testing.T) {
	admin := dial(t, server.Addr, nil)
	target := fencelocktest.Target{
		New: func(t *testing.T) fencelock.Backend { return newBackend(dial(t, server.Addr, nil)) },
		TTL: sessionTimeout,
		Drop: func(t *testing.T, name string) {
			dropHolder(t, admin, newBackend(admin).Path(name))
		},
	}
	fencelocktest.Run(t, target)
	t.Run("Election", func(t *testing.T) { fencelocktest.RunElection(t, target) })
}
