package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Each node may be any Redis deployment: here a Cluster, a Sentinel-managed master and a
// single server. The Cluster node announces releases with sharded pub/sub, in the lock's slot.
func TestMixedDeployments(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	cluster := testserver.StartCluster(t, 3).ClientT(t)
	sentinel := testserver.StartSentinel(t).ClientT(t)
	single := testserver.StartRedis(t).ClientT(t)
	b := newBackend(t, []redisbackend.Client{cluster, sentinel, single})
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(2*time.Second)))
	const name = "mixed"

	lock, err := c.Obtain(ctx, name, fencelock.WithMetadata("mixed holder"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil || !info.Held || info.Owner != lock.Owner() || info.Token != lock.Token() || info.Meta != "mixed holder" {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
	if infos, err := fencelock.List(ctx, b, "mix"); err != nil || len(infos) != 1 || infos[0].Name != name {
		t.Fatalf("List: %+v %v", infos, err)
	}

	// A release message on the Cluster node alone reaches a waiter. WatchRelease returns once
	// a majority of nodes took the subscription, which need not include the Cluster: publish
	// once it has.
	released, stop, err := b.WatchRelease(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	channel := b.Key(name) + ":released"
	waitFor(t, 10*time.Second, "the Cluster node's subscription to "+channel, func() bool {
		subs, err := cluster.PubSubShardNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return subs[channel] > 0
	})
	if err := cluster.SPublish(ctx, channel, "").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up from the Cluster node's shard channel")
	}
	stop()
	stop()

	if _, err := newLocker(t, b).TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another owner: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= lock.Token() {
		t.Fatalf("token %d after %d", again.Token(), lock.Token())
	}
	_ = again.Release(ctx)
}
