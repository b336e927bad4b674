package testserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestClusterKeysAcrossSlots(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Nodes) != 3 || len(c.Addrs) != 3 {
		t.Fatalf("got %d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs))
	}
	ctx := context.Background()
	cc := c.ClientT(t)

	// Pick keys until every master owns one, so the test provably crosses
	// slots and nodes rather than trusting the key names to spread.
	owner := map[string]string{} // master addr -> key
	slots := map[int64]bool{}
	for i := 0; len(owner) < len(c.Nodes) && i < 1000; i++ {
		key := fmt.Sprintf("key-%d", i)
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := owner[m.Options().Addr]; !ok {
			owner[m.Options().Addr] = key
		}
	}
	if len(owner) != len(c.Nodes) {
		t.Fatalf("keys map to only %d of %d masters", len(owner), len(c.Nodes))
	}
	for addr, key := range owner {
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		if err := cc.Set(ctx, key, addr, 0).Err(); err != nil {
			t.Fatalf("SET %s (master %s): %v", key, addr, err)
		}
	}
	if len(slots) != len(c.Nodes) {
		t.Fatalf("keys share slots: %v", slots)
	}
	for addr, key := range owner {
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != addr {
			t.Fatalf("GET %s = %q, %v; want %q", key, got, err, addr)
		}
		// The value really lives on the node the client routed it to.
		n := directClient(t, addr)
		if got, err := n.Get(ctx, key).Result(); err != nil || got != addr {
			t.Fatalf("GET %s on %s directly = %q, %v", key, addr, got, err)
		}
	}
}

func TestNewClusterNeedsThreeMasters(t *testing.T) {
	t.Parallel()
	if c, err := NewCluster(2); err == nil {
		c.Close()
		t.Fatal("NewCluster(2) succeeded")
	}
}

// MoveSlot moves a slot with its keys, and the old owner drops the slot's shard-channel
// subscriptions, telling its subscribers so.
func TestClusterMoveSlot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	ctx := context.Background()
	cc := c.ClientT(t)
	const key = "{moved}:key"
	slot64, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(slot64)
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	sub := directClient(t, c.Nodes[from].Addr).SSubscribe(ctx, "{moved}:channel")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	to := (from + 1) % len(c.Nodes)
	if err := c.MoveSlot(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	if got, err := directClient(t, c.Nodes[to].Addr).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s on the new owner = %q, %v; want v", key, got, err)
	}
	msg, err := sub.Receive(ctx)
	if s, ok := msg.(*redis.Subscription); err != nil || !ok || s.Kind != "sunsubscribe" {
		t.Fatalf("the old owner's subscriber got %v, %v; want its sunsubscribe", msg, err)
	}
}
