package redisbackend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

func TestConformance(t *testing.T) {
	deployments := []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
		opts   []redisbackend.Option
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return testserver.StartRedis(t).ClientT(t) }, nil},
		{"cluster", func(t *testing.T) redis.UniversalClient { return testserver.StartCluster(t, 3).ClientT(t) }, nil},
		{"sentinel", func(t *testing.T) redis.UniversalClient { return testserver.StartSentinel(t).ClientT(t) }, nil},
		// One slot: every call made while another is in flight goes out in a batch.
		{"single-pipelined", func(t *testing.T) redis.UniversalClient { return testserver.StartRedis(t).ClientT(t) },
			[]redisbackend.Option{redisbackend.WithPipelining(1)}},
		{"cluster-pipelined", func(t *testing.T) redis.UniversalClient { return testserver.StartCluster(t, 3).ClientT(t) },
			[]redisbackend.Option{redisbackend.WithPipelining(1)}},
	}
	// Each deployment is servers of its own, and its suite mostly waits on them: the
	// deployments run at once, each subtest in a goroutine of its own.
	var wg sync.WaitGroup
	for _, d := range deployments {
		wg.Go(func() {
			t.Run(d.name, func(t *testing.T) {
				rdb := d.client(t)
				target := fencelocktest.Target{
					New: func(t *testing.T) fencelock.Backend {
						b := redisbackend.New(rdb, d.opts...)
						t.Cleanup(func() { _ = b.Close() })
						return b
					},
					TTL: time.Second,
					Drop: func(t *testing.T, name string) {
						if err := rdb.Del(context.Background(), redisbackend.New(rdb).Key(name)).Err(); err != nil {
							t.Fatal(err)
						}
					},
					DropPermit: func(t *testing.T, name, owner string) {
						ctx, key := context.Background(), redisbackend.New(rdb).Key(name)
						if err := rdb.HDel(ctx, key+":s", "o:"+owner).Err(); err != nil {
							t.Fatal(err)
						}
						if err := rdb.ZRem(ctx, key+":s:x", owner).Err(); err != nil {
							t.Fatal(err)
						}
					},
				}
				fencelocktest.Run(t, target)
				t.Run("Semaphore", func(t *testing.T) { fencelocktest.RunSemaphore(t, target) })
				t.Run("Election", func(t *testing.T) { fencelocktest.RunElection(t, target) })
				t.Run("RWLock", func(t *testing.T) { fencelocktest.RunRWLock(t, target) })
				t.Run("Model", func(t *testing.T) {
					fencelocktest.RunModel(t, target, fencelocktest.Model{TTL: 100 * time.Millisecond, Semaphores: true, Elections: true,
						// A lost lock's release, once its owner held the name again, said "ok".
						Regressions: []uint64{680080392}})
				})
			})
		})
	}
	wg.Wait()
}
