package redisbackend_test

import (
	"context"
	"strings"
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
	failOverMasterOf(t, ctx, rc, b.Key(name))
	lock, err = c.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("acquire after the failover: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// After a Cluster failover that kept the lock (the replica had it), the loss watch follows the
// key to its new master: the holder is not told of a loss, and a DEL there afterwards reaches
// it by push, before its first renewal.
func TestLossByPushAfterClusterFailover(t *testing.T) {
	t.Parallel()
	rc := testserver.StartReplicatedCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := rc.ClientT(t)
	b := redisbackend.New(rc.ClientT(t), redisbackend.WithReplicas(1, time.Second))
	defer b.Close()
	c := fencelock.New(b)
	defer c.Close()
	const name = "watched-over-failover"
	lock, err := c.TryObtain(ctx, name, fencelock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	awaitTrackedRead(t, ctx, rdb) // the watch starts 10 ms into the hold
	failOverMasterOf(t, ctx, rc, b.Key(name))
	select {
	case <-lock.Context().Done():
		t.Fatalf("lost at a failover that kept the key: %v", context.Cause(lock.Context()))
	case <-time.After(3 * time.Second): // the watch reads the key on the new master meanwhile
	}
	if err := rdb.Del(ctx, b.Key(name)).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a DEL on the new master did not reach the holder within 5 s; its first renewal is 10 s into the hold")
	}
	if err := context.Cause(lock.Context()); !strings.Contains(err.Error(), "the server says") {
		t.Fatalf("cause %v: want the loss the server told of", err)
	}
}

// failOverMasterOf makes a replica of key's master take over (CLUSTER FAILOVER FORCE) and
// waits until the Cluster agrees on it.
func failOverMasterOf(t *testing.T, ctx context.Context, rc *testserver.ReplicatedCluster, key string) {
	t.Helper()
	m, err := rc.Master(ctx, key)
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
}
