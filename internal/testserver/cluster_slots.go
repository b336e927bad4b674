package testserver

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// moveSlotTimeout bounds MoveSlot, with the wait for every node to agree.
const moveSlotTimeout = 30 * time.Second

// SlotOwner returns the index in Nodes of the master that serves slot, as every node sees it.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (int, error) {
	owner := -1
	for _, n := range c.Nodes {
		i, err := c.ownerSeenBy(ctx, n, slot)
		if err != nil {
			return 0, err
		}
		if owner >= 0 && i != owner {
			return 0, fmt.Errorf("testserver: the nodes disagree about who serves slot %d", slot)
		}
		owner = i
	}
	return owner, nil
}

// ownerSeenBy returns the index in Nodes of the master that serves slot according to n.
func (c *Cluster) ownerSeenBy(ctx context.Context, n *Redis, slot int) (int, error) {
	rc := n.Client()
	defer rc.Close()
	shards, err := rc.ClusterShards(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("testserver: CLUSTER SHARDS on %s: %w", n.Addr, err)
	}
	for _, sh := range shards {
		if !slices.ContainsFunc(sh.Slots, func(r redis.SlotRange) bool { return int(r.Start) <= slot && slot <= int(r.End) }) {
			continue
		}
		for _, m := range sh.Nodes {
			if m.Role != "master" {
				continue
			}
			for i, node := range c.Nodes {
				if int64(node.Port) == m.Port {
					return i, nil
				}
			}
			return 0, fmt.Errorf("testserver: %s says an unknown node, port %d, serves slot %d", n.Addr, m.Port, slot)
		}
	}
	return 0, fmt.Errorf("testserver: %s says no master serves slot %d", n.Addr, slot)
}

// MoveSlot moves slot, with its keys, to the master Nodes[to], as redis-cli --cluster reshard
// does: the target imports it, the owner migrates its keys, and every master is told the new
// owner. It returns once every node says Nodes[to] serves the slot. The old owner drops the
// shard-channel subscriptions of the slot on the way, as a migration does.
func (c *Cluster) MoveSlot(ctx context.Context, slot, to int) error {
	ctx, cancel := context.WithTimeout(ctx, moveSlotTimeout)
	defer cancel()
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("testserver: %s serves slot %d already", c.Nodes[to].Addr, slot)
	}
	src, dst := c.Nodes[from], c.Nodes[to]
	srcID, err := nodeDo(ctx, src.Addr, "CLUSTER", "MYID").Text()
	if err != nil {
		return fmt.Errorf("testserver: CLUSTER MYID on %s: %w", src.Addr, err)
	}
	dstID, err := nodeDo(ctx, dst.Addr, "CLUSTER", "MYID").Text()
	if err != nil {
		return fmt.Errorf("testserver: CLUSTER MYID on %s: %w", dst.Addr, err)
	}
	if err := nodeDo(ctx, dst.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("testserver: importing slot %d on %s: %w", slot, dst.Addr, err)
	}
	if err := nodeDo(ctx, src.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("testserver: migrating slot %d on %s: %w", slot, src.Addr, err)
	}
	if err := c.migrateKeys(ctx, src, dst, slot); err != nil {
		return err
	}
	// The target first, then the old owner, then the rest: the order redis-cli uses, so that
	// no node sends a client to a node that refuses the slot.
	order := []*Redis{dst, src}
	for _, n := range c.Nodes {
		if n != src && n != dst {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := nodeDo(ctx, n.Addr, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return fmt.Errorf("testserver: giving slot %d to %s on %s: %w", slot, dst.Addr, n.Addr, err)
		}
	}
	for {
		owner, err := c.SlotOwner(ctx, slot)
		if err == nil && owner == to {
			return nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("testserver: slot %d not served by %s on every node: %v", slot, dst.Addr, err)
		}
	}
}

// migrateKeys moves every key of slot from src to dst.
func (c *Cluster) migrateKeys(ctx context.Context, src, dst *Redis, slot int) error {
	rc := src.Client()
	defer rc.Close()
	for {
		keys, err := rc.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("testserver: CLUSTER GETKEYSINSLOT on %s: %w", src.Addr, err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := rc.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("testserver: MIGRATE from %s to %s: %w", src.Addr, dst.Addr, err)
		}
	}
}
