package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/redisbackend"
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
		// with two busy loops beside the suite, which kept a node 200 ms from answering; it
		// came back with a 600 ms node timeout too). So a release in the model's histories
		// returns once every node has let the lock go, as the model's store does at once.
		model := target
		model.New = func(t *testing.T) fencelock.Backend {
			return settledReleases{newBackend(t, dial(t, addrs), redlock.WithNodeTimeout(600*time.Millisecond)), admin}
		}
		fencelocktest.RunModel(t, model, fencelocktest.Model{Histories: 8, AtOnce: 4, TTL: time.Second, Elections: true, Regressions: []uint64{679045272}})
	})
}

// settledReleases is a Redlock Backend whose Release, when it ended the owner's lock, returns
// once no node has the lock as the owner's any more (within 5 s): Redlock's own returns once a
// majority has.
type settledReleases struct {
	*redlock.Backend
	nodes []redisbackend.Client
}

func (b settledReleases) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	n, err := b.Backend.Release(ctx, lease, hold)
	if err != nil || n != 0 || lease.Limit > 0 {
		return n, err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !slices.Contains(owners(b.nodes, b.Key(lease.Name)), lease.Owner) {
			break
		}
	}
	return n, nil
}
