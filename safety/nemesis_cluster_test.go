package safety

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// nemesisCluster is the servers of one backend under the nemesis, and what the nemesis can do
// to them.
type nemesisCluster struct {
	kind    string   // redis, redlock, etcd, zk: the workers' backend
	client  string   // for redis and redlock: the workers' Redis client (see nemesisClients)
	label   string   // for the report
	targets []string // the servers' addresses
	session time.Duration
	minTTL  time.Duration // the shortest TTL the workers draw
	maxTTL  time.Duration // the longest; zero for the menu's longest

	pause, resume func(i int) error // nil where a server cannot be stopped (in-process etcd)
	restart       func(i int) error // kill and start again
	dataLoss      bool              // a restart comes back empty
	direct        []*redis.Client   // Redis servers, for key deletes and the TTL scan
	key           func(name string) string
}

// permits is the limit of the semaphores the workers' permit thread takes, or 0 where the
// backend keeps none.
func (c *nemesisCluster) permits() int {
	if c.kind == "redis" || c.kind == "etcd" || c.kind == "zk" {
		return permitLimit
	}
	return 0
}

func (c *nemesisCluster) can(kind string) bool {
	switch kind {
	case "pause-server":
		return c.pause != nil
	case "delete-key", "oom":
		return c.direct != nil
	}
	return true
}

// startRedisNemesis starts n Redis servers without persistence: one for redisbackend, three
// or five for Redlock.
func startRedisNemesis(t *testing.T, n int) *nemesisCluster {
	kind, label := "redis", "redis (single node)"
	if n > 1 {
		kind, label = "redlock", fmt.Sprintf("redlock (%d nodes)", n)
	}
	c := &nemesisCluster{kind: kind, label: label, dataLoss: true, key: func(name string) string { return "fencelock:{" + name + "}" }}
	var servers []*testserver.Redis
	for range n {
		s := testserver.StartRedis(t, "--save", "", "--appendonly", "no")
		servers = append(servers, s)
		c.targets = append(c.targets, s.Addr)
		c.direct = append(c.direct, s.ClientT(t))
	}
	c.pause = func(i int) error { return servers[i].Pause() }
	c.resume = func(i int) error { return servers[i].Resume() }
	c.restart = func(i int) error {
		if err := servers[i].Kill(); err != nil {
			return err
		}
		return servers[i].Restart()
	}
	return c
}

// startRedisNemesisOn is startRedisNemesis for one node, with workers on another Redis
// client than go-redis, through its adapter.
func startRedisNemesisOn(t *testing.T, client string) *nemesisCluster {
	c := startRedisNemesis(t, 1)
	c.client, c.label = client, "redis (single node, "+client+")"
	return c
}

// startEtcdNemesis starts three etcd members in this process. A member cannot be stopped with
// SIGSTOP here; its links can be silenced instead.
func startEtcdNemesis(t *testing.T) *nemesisCluster {
	cl := etcdtest.Start(t, etcdtest.Options{Members: 3})
	c := &nemesisCluster{kind: "etcd", label: "etcd (3 members)", minTTL: time.Second}
	for _, m := range cl.Members {
		c.targets = append(c.targets, m.Addr)
	}
	c.restart = func(i int) error {
		cl.Members[i].Kill()
		return cl.Members[i].Restart()
	}
	return c
}

// startZKNemesis starts a standalone ZooKeeper with the shortest session timeout it grants
// but one: 2s, so that a lock of a 2s TTL can be checked for spurious losses.
func startZKNemesis(t *testing.T) *nemesisCluster {
	s := zktest.Start(t, zktest.Options{})
	c := &nemesisCluster{kind: "zk", label: "zookeeper (standalone)", targets: []string{s.Addr}, session: 2 * time.Second, minTTL: 100 * time.Millisecond}
	c.pause = func(int) error { return s.Pause() }
	c.resume = func(int) error { return s.Resume() }
	c.restart = func(int) error {
		if err := s.Kill(); err != nil {
			return err
		}
		return s.Restart()
	}
	return c
}

// deleteKey deletes name's lock (and, as an eviction would, now and then its line and fence
// counter) on server i, or on every server when i is out of range.
func (c *nemesisCluster) deleteKey(name string, i int, all bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k := c.key(name)
	keys := []string{k}
	if all {
		keys = append(keys, k+":q", k+":q:e", k+":fence")
	}
	var err error
	for j, d := range c.direct {
		if i < len(c.direct) && j != i {
			continue
		}
		if e := d.Del(ctx, keys...).Err(); e != nil {
			err = e
		}
	}
	return err
}

// oom makes Redis server i refuse writes for want of memory, as a full server under
// noeviction (the policy fencelock doctor recommends) does: maxmemory set below what it uses;
// with on false, it lifts the limit again.
func (c *nemesisCluster) oom(i int, on bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d := c.direct[i]
	if !on {
		return d.ConfigSet(ctx, "maxmemory", "0").Err()
	}
	if err := d.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return err
	}
	info, err := d.InfoMap(ctx, "memory").Result()
	if err != nil {
		return err
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		return fmt.Errorf("server %d: used_memory: %w", i, err)
	}
	return d.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err()
}

// keysWithoutTTL scans every Redis server for keys that never expire.
func (c *nemesisCluster) keysWithoutTTL(ctx context.Context) []string {
	var out []string
	for i, d := range c.direct {
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		iter := d.Scan(sctx, 0, "*", 1000).Iterator()
		for iter.Next(sctx) {
			if ttl, err := d.PTTL(sctx, iter.Val()).Result(); err == nil && ttl == -1 {
				out = append(out, fmt.Sprintf("server %d: %s", i, iter.Val()))
			}
		}
		cancel()
	}
	return out
}
