package redisbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// After a Cluster failover, an acquire that waits for replicas reaches the new master at once,
// though the cluster client's slot map, loaded before, still names the old one.
func TestWithReplicasAfterClusterFailover(t *testing.T) {
	t.Parallel()
	rc := testserver.StartReplicatedCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := redisbackend.New(rc.ClientT(t), redisbackend.WithReplicas(1, time.Second))
	c := fencelock.New(b)
	defer c.Close()
	const name = "after-failover"
	lock, err := c.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := rc.Master(ctx, b.Key(name))
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Failover(ctx, r, "FORCE"); err != nil {
		t.Fatal(err)
	}
	if err := rc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	lock, err = c.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("acquire after the failover: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
