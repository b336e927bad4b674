package testserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A write that reached the master while its replication link was blackholed is lost by a
// forced failover; one acknowledged by the replica before is not.
func TestClusterReplicasFailoverLosesBlackholedWrite(t *testing.T) {
	t.Parallel()
	c := StartReplicatedCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const kept, lost = "{replicas}kept", "{replicas}lost"
	m, err := c.Master(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	// The cluster client reaches the master directly, so the blackhole does not stop it.
	cc := c.ClientT(t)
	if err := cc.Set(ctx, kept, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT counts the writes of its own connection.
	conn := directClient(t, c.Nodes[m].Addr).Conn()
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.Set(ctx, kept, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT before the blackhole = %d, %v; want 1", n, err)
	}

	c.Proxies[m].Blackhole()
	if err := cc.Set(ctx, lost, "1", 0).Err(); err != nil {
		t.Fatalf("SET with the replication link blackholed: %v", err)
	}
	if err := conn.Set(ctx, lost, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Wait(ctx, 1, 200*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT with the link blackholed = %d, %v; want 0", n, err)
	}
	info, err := directClient(t, c.Nodes[r].Addr).Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if s := infoField(info, "master_link_status"); s != "up" {
		t.Fatalf("the replica's link is %q during the blackhole; the window should be silent", s)
	}

	if err := c.Failover(ctx, r, "FORCE"); err != nil {
		t.Fatal(err)
	}
	promoted := directClient(t, c.Nodes[r].Addr)
	if got, err := promoted.Get(ctx, kept).Result(); err != nil || got != "1" {
		t.Fatalf("GET %s on the new master = %q, %v; want the replicated write", kept, got, err)
	}
	if got, err := promoted.Get(ctx, lost).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s on the new master = %q, %v; want it lost", lost, got, err)
	}
	c.Proxies[m].Restore()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The old master resynced from the new one and did not bring the write back.
	if got, err := cc.Get(ctx, lost).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s after the resync = %q, %v; want it lost", lost, got, err)
	}
	if m2, err := c.Master(ctx, kept); err != nil || m2 != r {
		t.Fatalf("master after the failover = %d, %v; want %d", m2, err, r)
	}
}
