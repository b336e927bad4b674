package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCluster is a Redis Cluster of masters with one replica each, where every node
// announces its Proxy (cluster-announce-port) instead of its own port. Replication links
// therefore run through the proxies, while the cluster bus (cluster-announce-bus-port is the
// node's real bus port) and the clients from Client do not. Blackholing a master's proxy opens
// a replication lag window that nothing else notices: the master keeps serving its slots, its
// replica still reports the link up and is still a healthy failover candidate, but receives no
// more writes, so a failover forced now loses them. Its methods are safe for concurrent use.
type ReplicatedCluster struct {
	// Nodes are the masters and replicas in the order they were started; redis-cli chooses
	// the initial roles, and failovers swap them, so ask Master and ReplicaOf.
	Nodes []*Redis
	// Proxies[i] forwards to Nodes[i]; its address is the one the cluster knows Nodes[i] by.
	Proxies []*Proxy

	ids    []string // cluster node ID of Nodes[i]
	probes []probe  // keys with known slots, to check replication on each master

	mu         sync.Mutex  // guards electionAt
	electionAt []time.Time // when Nodes[i] last started an election through Failover
}

const (
	// replicatedNodeTimeout is the cluster-node-timeout of a ReplicatedCluster.
	replicatedNodeTimeout = 2 * time.Second
	// electionSpacing separates two elections of one replica. For 4 node timeouts after an
	// election started, Redis (7.0) keeps its outcome: a replica demoted and asked to fail over
	// again within that time "wins" at once with the old, outdated epoch, and the cluster
	// overrules it, or it refuses to start a new election until the manual failover times out.
	electionSpacing = 4*replicatedNodeTimeout + 500*time.Millisecond
)

// probe is a key and its hash slot.
type probe struct {
	key  string
	slot int
}

// StartReplicatedCluster starts a cluster of masters (at least 3), each with one replica
// behind announce proxies, and stops it when the test ends. It returns once every replica
// acknowledges its master's writes.
func StartReplicatedCluster(t testing.TB, masters int) *ReplicatedCluster {
	t.Helper()
	c, err := NewReplicatedCluster(masters)
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

// NewReplicatedCluster is StartReplicatedCluster without a testing.TB; the caller must Close it.
func NewReplicatedCluster(masters int) (*ReplicatedCluster, error) {
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
	c := &ReplicatedCluster{}
	ok := false
	defer func() {
		if !ok {
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	for range 2 * masters {
		n, err := newRedisServer(redisSpec{
			kind:    "cluster",
			busPort: true,
			extra: []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.FormatInt(replicatedNodeTimeout.Milliseconds(), 10),
				// Roles swap at every failover; a diskless sync without delay takes
				// milliseconds instead of the default 5s wait for more replicas.
				"--repl-diskless-sync", "yes",
				"--repl-diskless-sync-delay", "0",
			},
		})
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		p, err := NewProxy(n.Addr)
		if err != nil {
			return nil, err
		}
		c.Proxies = append(c.Proxies, p)
		if err := announceProxy(ctx, n, p); err != nil {
			return nil, err
		}
	}

	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := runSpawned(exec.CommandContext(ctx, cli, args...)); err != nil {
		return nil, fmt.Errorf("testserver: %s --cluster create: %v\n%s", f.cli, err, out)
	}
	for _, n := range c.Nodes {
		id, err := nodeDo(ctx, n.Addr, "CLUSTER", "MYID").Text()
		if err != nil {
			return nil, fmt.Errorf("testserver: CLUSTER MYID on %s: %w", n.Addr, err)
		}
		c.ids = append(c.ids, id)
	}
	// Enough keys that every shard owns some (one shard of 3 owning none of 64 hashed keys:
	// ~1e-11, and the names are fixed).
	for i := range 64 {
		key := "testserver:probe:" + strconv.Itoa(i)
		slot, err := nodeDo(ctx, c.Nodes[0].Addr, "CLUSTER", "KEYSLOT", key).Int()
		if err != nil {
			return nil, fmt.Errorf("testserver: CLUSTER KEYSLOT: %w", err)
		}
		c.probes = append(c.probes, probe{key, slot})
	}
	c.electionAt = make([]time.Time, len(c.Nodes))
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// announceProxy makes n announce p's port to the cluster, and its real bus port, so gossip
// keeps flowing when p is cut.
func announceProxy(ctx context.Context, n *Redis, p *Proxy) error {
	rc := redis.NewClient(&redis.Options{Addr: n.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rc.Close()
	cfg, err := rc.ConfigGet(ctx, "cluster-port").Result()
	if err != nil || cfg["cluster-port"] == "" {
		return fmt.Errorf("testserver: CONFIG GET cluster-port on %s: %v %v", n.Addr, cfg, err)
	}
	_, port, _ := net.SplitHostPort(p.Addr)
	return configSet(ctx, n.Addr,
		"cluster-announce-ip", "127.0.0.1",
		"cluster-announce-port", port,
		"cluster-announce-bus-port", cfg["cluster-port"])
}

// nodeDo runs one command on the node at addr over a connection of its own.
func nodeDo(ctx context.Context, addr string, args ...any) *redis.Cmd {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	return c.Do(ctx, args...)
}

// Client returns a new cluster client that reaches every node directly, not through its proxy,
// and honours context deadlines; the caller closes it.
func (c *ReplicatedCluster) Client() *redis.ClusterClient {
	direct := make(map[string]string, len(c.Nodes))
	announced := make([]string, len(c.Nodes))
	for i, p := range c.Proxies {
		direct[p.Addr] = c.Nodes[i].Addr
		announced[i] = p.Addr
	}
	var d net.Dialer
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 announced,
		ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if a, ok := direct[addr]; ok {
				addr = a
			}
			return d.DialContext(ctx, network, addr)
		},
	})
}

// ClientT is Client closed automatically when the test ends.
func (c *ReplicatedCluster) ClientT(t testing.TB) *redis.ClusterClient {
	cc := c.Client()
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Close stops every node and proxy and removes the nodes' directories; it is idempotent.
func (c *ReplicatedCluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Close())
	}
	for _, p := range c.Proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Master returns the index in Nodes of the master serving key, as every node sees it.
func (c *ReplicatedCluster) Master(ctx context.Context, key string) (int, error) {
	slot, err := nodeDo(ctx, c.Nodes[0].Addr, "CLUSTER", "KEYSLOT", key).Int()
	if err != nil {
		return 0, fmt.Errorf("testserver: CLUSTER KEYSLOT: %w", err)
	}
	t, err := c.topology(ctx)
	if err != nil {
		return 0, err
	}
	for i, v := range t {
		if v.master == "" && v.serves(slot) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("testserver: no master serves slot %d", slot)
}

// ReplicaOf returns the index in Nodes of the replica of the master Nodes[master].
func (c *ReplicatedCluster) ReplicaOf(ctx context.Context, master int) (int, error) {
	t, err := c.topology(ctx)
	if err != nil {
		return 0, err
	}
	for i, v := range t {
		if v.master == c.ids[master] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("testserver: %s has no replica", c.Nodes[master].Addr)
}

// Failover runs CLUSTER FAILOVER mode ("", "FORCE" or "TAKEOVER") on the replica Nodes[replica]
// and waits until every node sees it as a master serving slots. It does not wait for the old
// master to resync as its replica: WaitReady does. A mode that holds an election ("" or
// "FORCE") first waits, if needed, until the replica's previous election through Failover is
// 4 node timeouts (8s) old; TAKEOVER holds none and never waits.
func (c *ReplicatedCluster) Failover(ctx context.Context, replica int, mode string) error {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	args := []any{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	addr := c.Nodes[replica].Addr
	if !strings.EqualFold(mode, "TAKEOVER") {
		c.mu.Lock()
		wait := time.Until(c.electionAt[replica].Add(electionSpacing))
		c.electionAt[replica] = time.Now().Add(max(wait, 0))
		c.mu.Unlock()
		if wait > 0 {
			if err := sleepCtx(ctx, wait); err != nil {
				return fmt.Errorf("testserver: waiting to fail over to %s again: %w", addr, err)
			}
		}
	}
	if err := nodeDo(ctx, addr, args...).Err(); err != nil {
		return fmt.Errorf("testserver: %v on %s: %w", args, addr, err)
	}
	for {
		lastErr := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			for i, n := range c.Nodes {
				v, err := c.view(ctx, i)
				if err != nil {
					return err
				}
				if e := v[replica]; e.master != "" || len(e.slots) == 0 {
					return fmt.Errorf("%s does not see %s as a master yet", n.Addr, addr)
				}
			}
			return nil
		})
		if lastErr == nil {
			return nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("testserver: CLUSTER FAILOVER %s on %s did not complete: %v", mode, addr, lastErr)
		}
	}
}

// WaitReady waits until every node agrees on who serves which slots and replicates whom,
// every master has a replica, and that replica acknowledges the master's writes. After a
// failover this is when the old master has resynced as a replica.
func (c *ReplicatedCluster) WaitReady(ctx context.Context) error {
	var lastErr error
	for {
		if lastErr = c.checkReady(ctx); lastErr == nil {
			return nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("testserver: cluster %v not ready: %v", c.ids, lastErr)
		}
	}
}

func (c *ReplicatedCluster) checkReady(ctx context.Context) error {
	t, err := c.topology(ctx)
	if err != nil {
		return err
	}
	for i, v := range t {
		if v.master != "" {
			continue
		}
		if len(v.slots) == 0 {
			return fmt.Errorf("master %s serves no slots", c.Nodes[i].Addr)
		}
		if err := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			return c.checkReplicated(ctx, i, v)
		}); err != nil {
			return err
		}
	}
	return nil
}

// checkReplicated writes a probe key of the master's slots and waits for one replica's ACK.
func (c *ReplicatedCluster) checkReplicated(ctx context.Context, master int, v nodeView) error {
	i := slices.IndexFunc(c.probes, func(p probe) bool { return v.serves(p.slot) })
	if i < 0 {
		return fmt.Errorf("no probe key falls in the slots of %s", c.Nodes[master].Addr)
	}
	key := c.probes[i].key
	rc := redis.NewClient(&redis.Options{Addr: c.Nodes[master].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rc.Close()
	if err := rc.Set(ctx, key, "1", 0).Err(); err != nil {
		return fmt.Errorf("probe on %s: %w", c.Nodes[master].Addr, err)
	}
	if err := rc.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("probe on %s: %w", c.Nodes[master].Addr, err)
	}
	n, err := rc.Wait(ctx, 1, 100*time.Millisecond).Result()
	if err != nil {
		return fmt.Errorf("WAIT on %s: %w", c.Nodes[master].Addr, err)
	}
	if n < 1 {
		return fmt.Errorf("no replica of %s acknowledged a write", c.Nodes[master].Addr)
	}
	return nil
}

// nodeView is what one node says about another in CLUSTER NODES.
type nodeView struct {
	master string   // the master's node ID for a replica, "" for a master
	slots  [][2]int // inclusive ranges served, for a master
	flags  string
}

func (v nodeView) serves(slot int) bool {
	for _, r := range v.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

func (v nodeView) equal(w nodeView) bool {
	return v.master == w.master && slices.Equal(v.slots, w.slots)
}

// view returns what Nodes[i] says about every node, indexed like Nodes.
func (c *ReplicatedCluster) view(ctx context.Context, i int) ([]nodeView, error) {
	out, err := nodeDo(ctx, c.Nodes[i].Addr, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", c.Nodes[i].Addr, err)
	}
	views := make([]nodeView, len(c.Nodes))
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES on %s: malformed line %q", c.Nodes[i].Addr, line)
		}
		j := slices.Index(c.ids, f[0])
		if j < 0 {
			return nil, fmt.Errorf("CLUSTER NODES on %s: unknown node %s", c.Nodes[i].Addr, f[0])
		}
		// The address the node is known by must be its proxy's, or replication bypasses it.
		if hostPort, _, _ := strings.Cut(f[1], "@"); hostPort != c.Proxies[j].Addr {
			return nil, fmt.Errorf("%s knows %s as %s, not as its proxy %s", c.Nodes[i].Addr, c.Nodes[j].Addr, hostPort, c.Proxies[j].Addr)
		}
		v := nodeView{flags: f[2]}
		if f[3] != "-" {
			v.master = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, found := strings.Cut(s, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES on %s: bad slots %q", c.Nodes[i].Addr, s)
			}
			v.slots = append(v.slots, [2]int{a, b})
		}
		views[j] = v
		seen++
	}
	if seen != len(c.Nodes) {
		return nil, fmt.Errorf("%s knows %d of %d nodes", c.Nodes[i].Addr, seen, len(c.Nodes))
	}
	return views, nil
}

// topology returns the view every node agrees on, with no node flagged failing.
func (c *ReplicatedCluster) topology(ctx context.Context) ([]nodeView, error) {
	var first []nodeView
	for i := range c.Nodes {
		v, err := c.view(ctx, i)
		if err != nil {
			return nil, err
		}
		for j, e := range v {
			for _, f := range strings.Split(e.flags, ",") {
				switch f {
				case "fail", "fail?", "handshake", "noaddr":
					return nil, fmt.Errorf("%s flags %s as %s", c.Nodes[i].Addr, c.Nodes[j].Addr, e.flags)
				}
			}
		}
		if first == nil {
			first = v
			continue
		}
		for j := range v {
			if !v[j].equal(first[j]) {
				return nil, fmt.Errorf("%s and %s disagree about %s", c.Nodes[0].Addr, c.Nodes[i].Addr, c.Nodes[j].Addr)
			}
		}
	}
	return first, nil
}
