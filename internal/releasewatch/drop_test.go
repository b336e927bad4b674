package releasewatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// A subscription the server dropped (its connection killed, or the server restarted) is taken
// again, and its waiters are woken then: a release may have passed while it was gone.
func TestDroppedSubscriptionIsRestored(t *testing.T) {
	t.Parallel()
	for _, drop := range []struct {
		name string
		do   func(t *testing.T, ctx context.Context, r *testserver.Redis)
	}{
		{"client kill", func(t *testing.T, ctx context.Context, r *testserver.Redis) {
			c := r.Client()
			defer c.Close()
			if n, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
				t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 connection killed", n, err)
			}
		}},
		{"restart", func(t *testing.T, ctx context.Context, r *testserver.Redis) {
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := r.Restart(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(drop.name, func(t *testing.T) {
			r := testserver.StartRedis(t)
			c := r.ClientT(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s := releasewatch.New(redisconn.GoRedis(c), false)
			defer s.Close()
			w := releasewatch.NewWaiter()
			ready, err := s.Add(ctx, "ch", w)
			if err != nil {
				t.Fatal(err)
			}
			await(t, ready, 10*time.Second, "subscription")

			drop.do(t, ctx, r)
			await(t, w.Wake, 20*time.Second, "wake-up once the subscription is back")
			awaitNumSub(t, ctx, c, "ch", false, 1)
			drain(w.Wake)
			if err := c.Publish(ctx, "ch", "released").Err(); err != nil {
				t.Fatal(err)
			}
			await(t, w.Wake, 10*time.Second, "release after the subscription is back")
		})
	}
}

// A Cluster failover moves a slot to the old master's replica, and the old master drops its
// subscribers to the slot's shard channels (it sends SUNSUBSCRIBE) while their connections
// stay open. The subscription is taken again, its waiters are woken, and they hear the next
// release from the new master.
func TestShardSubscriptionRestoredAfterFailover(t *testing.T) {
	t.Parallel()
	rc := testserver.StartReplicatedCluster(t, 3)
	c := rc.ClientT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ch = "failover-ch"
	s := releasewatch.New(redisconn.GoRedis(c), true)
	defer s.Close()
	w := releasewatch.NewWaiter()
	ready, err := s.Add(ctx, ch, w)
	if err != nil {
		t.Fatal(err)
	}
	await(t, ready, 10*time.Second, "subscription")

	m, err := rc.Master(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	replica, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Failover(ctx, replica, "FORCE"); err != nil {
		t.Fatal(err)
	}
	await(t, w.Wake, 30*time.Second, "wake-up after the failover")
	drain(w.Wake)
	// The new master may take a moment to learn of the subscriber on its old master, now its
	// replica: publish until the waiter hears one.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := c.SPublish(ctx, ch, "released").Err(); err != nil {
			t.Logf("SPUBLISH: %v", err)
		}
		select {
		case <-w.Wake:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no release heard after the failover")
		}
	}
}

// A slot moved to another master takes its shard channels' subscriptions with it: the old
// master drops them, and refuses them afterwards (MOVED, which go-redis does not pass on). The
// subscription is taken again on the new master, its waiters are woken, and they hear the
// next release.
func TestShardSubscriptionFollowsAMovedSlot(t *testing.T) {
	t.Parallel()
	cl := testserver.StartCluster(t, 3)
	c := cl.ClientT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, ch, _ := onTwoNodes(t, ctx, cl, c, "moved")
	s := releasewatch.New(redisconn.GoRedis(c), true)
	defer s.Close()
	w := releasewatch.NewWaiter()
	ready, err := s.Add(ctx, ch, w)
	if err != nil {
		t.Fatal(err)
	}
	await(t, ready, 10*time.Second, "subscription")

	from, err := c.MasterForKey(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	var to *redis.Client
	for _, n := range cl.Nodes {
		if n.Addr != from.Options().Addr {
			to = n.Client()
			defer to.Close()
			break
		}
	}
	moveSlot(t, ctx, cl, releasewatch.Slot(ch), from, to)

	await(t, w.Wake, 30*time.Second, "wake-up after the slot moved")
	drain(w.Wake)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := c.SPublish(ctx, ch, "released").Err(); err != nil {
			t.Logf("SPUBLISH: %v", err)
		}
		select {
		case <-w.Wake:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no release heard after the slot moved")
		}
	}
}

// moveSlot migrates an empty slot from one master to another and tells every node.
func moveSlot(t *testing.T, ctx context.Context, cl *testserver.Cluster, slot int, from, to *redis.Client) {
	t.Helper()
	fromID, err := from.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	toID, err := to.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		nc := n.Client()
		err := nc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		_ = nc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
