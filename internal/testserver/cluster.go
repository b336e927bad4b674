package testserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReadyTimeout bounds cluster formation: redis-cli polls the gossip once
// a second, so this needs more headroom than a single server's start.
const clusterReadyTimeout = 30 * time.Second

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Addrs []string
	Nodes []*Redis
}

// StartCluster starts a cluster of masters (at least 3, Redis Cluster's
// minimum) and stops it when the test ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	c, err := NewCluster(masters)
	if err != nil {
		t.Fatalf("%v", err)
	}
	procs := make([]*process, len(c.Nodes))
	for i, n := range c.Nodes {
		procs[i] = n.proc
	}
	cleanupOnEnd(t, c.Close, procs...)
	return c
}

// NewCluster is StartCluster without a testing.TB; the caller must Close it.
func NewCluster(masters int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("testserver: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	f, err := currentFlavor()
	if err != nil {
		return nil, err
	}
	cli, err := f.cliBinary()
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			_ = c.Close()
		}
	}()
	for i := 0; i < masters; i++ {
		n, err := newRedisServer(redisSpec{
			kind:    "cluster",
			busPort: true, // the default bus port (port+10000) may be taken or out of range
			extra: []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000",
			},
		})
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := runSpawned(exec.CommandContext(ctx, cli, args...)); err != nil {
		return nil, fmt.Errorf("testserver: %s --cluster create: %v\n%s", f.cli, err, out)
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// waitReady waits until every node agrees the cluster is healthy and a
// cluster client can use every master, so tests never see CLUSTERDOWN.
func (c *Cluster) waitReady(ctx context.Context) error {
	var lastErr error
	for {
		if lastErr = c.checkReady(ctx); lastErr == nil {
			return nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("testserver: cluster %v not ready: %v", c.Addrs, lastErr)
		}
	}
}

func (c *Cluster) checkReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		err := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			rc := n.Client()
			defer rc.Close()
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if s := infoField(info, "cluster_state"); s != "ok" {
				return fmt.Errorf("%s: cluster_state:%s", n.Addr, s)
			}
			if k := infoField(info, "cluster_known_nodes"); k != strconv.Itoa(len(c.Nodes)) {
				return fmt.Errorf("%s: cluster_known_nodes:%s", n.Addr, k)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	cc := c.Client()
	defer cc.Close()
	// Enough keys that every master serves some of them (the chance one of 3
	// masters gets none of 48 hashed keys is ~1e-8, and the names are fixed).
	for i := 0; i < 16*len(c.Nodes); i++ {
		key := fmt.Sprintf("testserver:ready:%d", i)
		err := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			if err := cc.Set(ctx, key, "1", 0).Err(); err != nil {
				return err
			}
			if err := cc.Get(ctx, key).Err(); err != nil {
				return err
			}
			return cc.Del(ctx, key).Err()
		})
		if err != nil {
			return fmt.Errorf("key %s: %w", key, err)
		}
	}
	return nil
}

// Close stops every node and removes their directories; it is idempotent.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// Client returns a new cluster client that honours context deadlines; the
// caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
}

// ClientT is Client closed automatically when the test ends.
func (c *Cluster) ClientT(t testing.TB) *redis.ClusterClient {
	cc := c.Client()
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
