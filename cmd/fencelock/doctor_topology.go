package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The shapes of a Redis deployment: one server, a Sentinel-managed master and its replicas, a
// Cluster. Each shape adds findings about the deployment as a whole to those of its nodes.

// singleTopology says what one redis:// server is, and whether the URL fits it.
func singleTopology(n *redisNode) []finding {
	if n.err != nil || n.info == nil || n.info["role"] == "slave" {
		return nil // the replication finding says what a replica means here
	}
	f := finding{Check: "topology", Node: n.addr}
	switch n.info["redis_mode"] {
	case "cluster":
		f.Severity = sevWarn
		f.Message = "this server is a Cluster node but the URL says redis://: locks whose keys belong to other nodes fail with MOVED. Use redis+cluster://."
	case "sentinel":
		f.Severity = sevWarn
		f.Message = "this is a Sentinel, not a data server: locks cannot be kept here. Use redis+sentinel://host:port/master."
	default:
		f.Severity = sevInfo
		f.Message = fmt.Sprintf("one %s: an efficiency lock. A restart, an eviction or a failover can let two holders overlap; check fencing tokens at the store where an overlap costs money, and use etcd or Redlock for a lock that survives losing a node.", serverName(n.info))
	}
	return []finding{f}
}

// serverName says which server INFO describes, and its version. Valkey names itself in
// server_name and keeps redis_version at the Redis it is compatible with (7.2.4 for Valkey
// 8.0.1), so its own version is valkey_version; Redis has no server_name.
func serverName(info map[string]string) string {
	if info["server_name"] == "valkey" {
		return fmt.Sprintf("Valkey server (version %s)", cmp.Or(info["valkey_version"], "unknown"))
	}
	return fmt.Sprintf("Redis server (version %s)", cmp.Or(info["redis_version"], "unknown"))
}

func auditCluster(ctx context.Context, c *redis.ClusterClient, ttl time.Duration) ([]finding, error) {
	var mu sync.Mutex
	var nodes []*redisNode
	err := c.ForEachShard(ctx, func(ctx context.Context, nc *redis.Client) error {
		n := probeRedis(ctx, nc, nc.Options().Addr)
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's nodes: %w", err)
	}
	slices.SortFunc(nodes, func(a, b *redisNode) int {
		return cmp.Or(cmp.Compare(roleOrder(a), roleOrder(b)), cmp.Compare(a.addr, b.addr))
	})
	var state string
	_ = probeStep(ctx, func(ctx context.Context) error {
		text, err := c.ClusterInfo(ctx).Result()
		state = parseInfo(text)["cluster_state"]
		return err
	})
	fs := []finding{clusterTopology(nodes, state)}
	for _, n := range nodes {
		fs = append(fs, nodeFindings(n, modeCluster, ttl)...)
	}
	if f, ok := independence(nodes); ok {
		fs = append(fs, f)
	}
	return fs, nil
}

func roleOrder(n *redisNode) int {
	if n.info["role"] == "master" {
		return 0
	}
	return 1
}

func clusterTopology(nodes []*redisNode, state string) finding {
	masters, replicas, bare := 0, 0, 0
	for _, n := range nodes {
		switch n.info["role"] {
		case "master":
			masters++
			if n.info["connected_slaves"] == "0" {
				bare++
			}
		case "slave":
			replicas++
		}
	}
	f := finding{Check: "topology", Severity: sevInfo}
	f.Message = fmt.Sprintf("a Cluster of %d %s and %d %s, cluster_state %s: each lock lives on the one master that owns its slot, so the Cluster spreads locks over masters but does not vote on them the way Redlock does; the findings of each master apply to the locks it holds.",
		masters, plural(masters, "master", "masters"), replicas, plural(replicas, "replica", "replicas"), cmp.Or(state, "unknown"))
	if bare > 0 {
		f.Message += fmt.Sprintf(" %d %s no replica: when one fails, its locks cannot be taken or renewed until it returns.", bare, plural(bare, "master has", "masters have"))
	}
	if state != "ok" {
		f.Severity = sevWarn
		f.Message += " The cluster is not ok: locks in slots without a serving master cannot be taken."
	}
	return f
}

// independence checks that every address is a server of its own: the same run ID behind two
// addresses is one server counted twice. It reports nothing for fewer than two servers.
func independence(nodes []*redisNode) (finding, bool) {
	byID := map[string][]string{}
	var ids []string
	for _, n := range nodes {
		id := n.info["run_id"]
		if n.err != nil || id == "" {
			continue
		}
		if byID[id] == nil {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], n.addr)
	}
	count := 0
	for _, addrs := range byID {
		count += len(addrs)
	}
	if count < 2 {
		return finding{}, false
	}
	f := finding{Check: "independence"}
	var dups []string
	for _, id := range ids {
		if addrs := byID[id]; len(addrs) > 1 {
			dups = append(dups, fmt.Sprintf("%s share run ID %s", strings.Join(addrs, ", "), id))
		}
	}
	if len(dups) == 0 {
		f.Severity = sevOK
		f.Message = fmt.Sprintf("%d addresses, %d distinct run IDs: each address is a server of its own.", count, len(ids))
		return f, true
	}
	f.Severity = sevFail
	f.Message = fmt.Sprintf("%s: one server reached through several addresses, not independent nodes, so a majority counted over them can be one server's word. List each server once, each on its own machine.", strings.Join(dups, "; "))
	return f, true
}

func auditSentinel(ctx context.Context, c *redis.Client, raw string, ttl time.Duration) []finding {
	sentinels, name := sentinelTarget(raw)
	topo, masterAddr := sentinelTopology(ctx, sentinels, name)
	fs := []finding{topo}
	m := probeRedis(ctx, c, cmp.Or(masterAddr, "master "+name))
	nodes := []*redisNode{m}
	base := c.Options()
	for _, addr := range replicaAddrs(m.info) {
		rc := redis.NewClient(&redis.Options{
			Addr: addr, Username: base.Username, Password: base.Password, DB: base.DB,
			TLSConfig: base.TLSConfig, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 2 * time.Second,
		})
		nodes = append(nodes, probeRedis(ctx, rc, addr))
		_ = rc.Close()
	}
	for _, n := range nodes {
		fs = append(fs, nodeFindings(n, modeSentinel, ttl)...)
	}
	return fs
}

// sentinelTarget reads the sentinel addresses and the master name from a redis+sentinel URL
// that openStore accepted.
func sentinelTarget(raw string) (addrs []string, master string) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, ""
	}
	master, _, _ = strings.Cut(strings.Trim(u.Path, "/"), "/")
	return strings.Split(u.Host, ","), master
}

// sentinelTopology asks the first sentinel that answers about the master.
func sentinelTopology(ctx context.Context, sentinels []string, name string) (finding, string) {
	f := finding{Check: "sentinel"}
	var lastErr error
	for _, addr := range sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 2 * time.Second})
		var m map[string]string
		lastErr = probeStep(ctx, func(ctx context.Context) error {
			var err error
			m, err = sc.Master(ctx, name).Result()
			return err
		})
		_ = sc.Close()
		if lastErr != nil {
			continue
		}
		f.Node = addr
		master := net.JoinHostPort(m["ip"], m["port"])
		others, _ := strconv.Atoi(m["num-other-sentinels"])
		count := others + 1
		detail := fmt.Sprintf("%d %s watch master %q at %s (quorum %s, %s known %s)", count, plural(count, "sentinel", "sentinels"),
			name, master, m["quorum"], m["num-slaves"], plural(atoiOr(m["num-slaves"]), "replica", "replicas"))
		switch {
		case strings.Contains(m["flags"], "down"):
			f.Severity = sevWarn
			f.Message = fmt.Sprintf("%s, flags %s: the sentinels think the master is down; a failover is due or under way, and locks not yet replicated will be lost with it.", detail, m["flags"])
		case count < 3:
			f.Severity = sevWarn
			f.Message = detail + ": with fewer than 3 sentinels on separate machines, too few observers decide a failover, and a sentinel that loses sight of a healthy master can promote a replica while the old master still takes locks from the clients that reach it. Run at least 3 sentinels."
		default:
			f.Severity = sevInfo
			f.Message = detail + ": failover is automatic; the replication findings below say what a failover can lose."
		}
		return f, master
	}
	f.Severity = sevWarn
	f.Message = fmt.Sprintf("no sentinel answered SENTINEL MASTER %s (%v): the topology could not be read; the master findings below come through the failover client.", name, lastErr)
	return f, ""
}

func atoiOr(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// replicaAddrs reads the replicas from INFO replication's slaveN lines:
// "ip=10.0.0.6,port=6379,state=online,offset=123,lag=0".
func replicaAddrs(info map[string]string) []string {
	var addrs []string
	for k, v := range info {
		if !strings.HasPrefix(k, "slave") || strings.Trim(k[len("slave"):], "0123456789") != "" || k == "slave" {
			continue
		}
		fields := map[string]string{}
		for kv := range strings.SplitSeq(v, ",") {
			if a, b, ok := strings.Cut(kv, "="); ok {
				fields[a] = b
			}
		}
		if fields["ip"] != "" && fields["port"] != "" {
			addrs = append(addrs, net.JoinHostPort(fields["ip"], fields["port"]))
		}
	}
	slices.Sort(addrs)
	return addrs
}

// auditRedlock audits each of Redlock's servers as a single server, and checks that they are
// independent: a majority counted over one server reached twice is that server's word alone.
func auditRedlock(ctx context.Context, nodes []*redis.Client, ttl time.Duration) []finding {
	probed := make([]*redisNode, len(nodes))
	for i, c := range nodes {
		probed[i] = probeRedis(ctx, c, c.Options().Addr)
	}
	f := finding{Check: "topology", Severity: sevOK,
		Message: fmt.Sprintf("Redlock over %d servers: a lock needs %d of them.", len(nodes), len(nodes)/2+1)}
	if len(nodes)%2 == 0 || len(nodes) < 3 {
		f.Severity = sevFail
		f.Message = fmt.Sprintf("Redlock over %d servers: use an odd number, at least 3.", len(nodes))
	}
	fs := []finding{f}
	if ind, ok := independence(probed); ok {
		fs = append(fs, ind)
	}
	for _, n := range probed {
		fs = append(fs, nodeFindings(n, modeSingle, ttl)...)
	}
	return fs
}
