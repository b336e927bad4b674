package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/redlock"
)

func TestConformance(t *testing.T) {
	admin := dial(t, addrs)
	key := newBackend(t, admin).Key
	target := fencelocktest.Target{
		// The default node timeout for a 1s TTL is 50ms; a busy test machine can exceed that
		// on a majority of nodes, which is not what the suite is about.
		New: func(t *testing.T) fencelock.Backend {
			return newBackend(t, dial(t, addrs), redlock.WithNodeTimeout(200*time.Millisecond))
		},
		TTL: time.Second,
		Drop: func(t *testing.T, name string) {
			for _, c := range admin {
				if err := c.(*redis.Client).Del(context.Background(), key(name)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
	fencelocktest.Run(t, target)
	t.Run("Election", func(t *testing.T) { fencelocktest.RunElection(t, target) })
	t.Run("Model", func(t *testing.T) {
		fencelocktest.RunModel(t, target, fencelocktest.Model{Histories: 8, TTL: time.Second, Elections: true})
	})
}
