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
		// The model compares outcomes, not timing: a Release returns once a majority deleted
		// the lock, and its call to the last node may still be on its way when another Client
		// tries the name. With that node still holding the old key, one more node past the
		// node timeout makes the attempt "held" where the model grants it (seed 679045272,
		// with two busy loops beside the suite, which kept a node 200 ms from answering).
		model := target
		model.New = func(t *testing.T) fencelock.Backend {
			return newBackend(t, dial(t, addrs), redlock.WithNodeTimeout(600*time.Millisecond))
		}
		fencelocktest.RunModel(t, model, fencelocktest.Model{Histories: 8, TTL: time.Second, Elections: true, Regressions: []uint64{679045272}})
	})
}
