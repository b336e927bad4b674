package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the Redis deployment is reached; it changes what some findings mean.
const (
	modeSingle   = "single"
	modeSentinel = "sentinel"
	modeCluster  = "cluster"
)

// redisParams are the settings doctor reads with CONFIG GET, one parameter per command so that
// servers older than Redis 7 answer too.
var redisParams = []string{
	"maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save",
	"min-replicas-to-write", "min-replicas-max-lag", "replica-read-only",
}

// redisNode is what doctor learned from one Redis server.
type redisNode struct {
	addr      string
	err       error // the node did not answer at all
	rtts      []time.Duration
	offset    time.Duration // server clock minus this machine's clock
	jitter    time.Duration // half the round trip of the TIME sample: the offset's uncertainty
	offsetErr error
	info      map[string]string
	infoErr   error
	config    map[string]string // nil when CONFIG GET was refused
	configErr error
}

func auditRedis(ctx context.Context, s *store, raw string, ttl time.Duration) ([]finding, error) {
	switch c := s.redis.(type) {
	case *redis.ClusterClient:
		return auditCluster(ctx, c, ttl)
	case *redis.Client:
		if s.kind == "redis+sentinel" {
			return auditSentinel(ctx, c, raw, ttl), nil
		}
		n := probeRedis(ctx, c, c.Options().Addr)
		fs := singleTopology(n)
		return append(fs, nodeFindings(n, modeSingle, ttl)...), nil
	}
	return nil, fmt.Errorf("unexpected Redis client %T", s.redis)
}

// probeStep runs one request to a node under its own bound.
func probeStep(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, doctorStep)
	defer cancel()
	return f(ctx)
}

// probeRedis reads everything the checks need from one server. It never fails: what it could
// not read is recorded, and the checks say so.
func probeRedis(ctx context.Context, c *redis.Client, addr string) *redisNode {
	n := &redisNode{addr: addr}
	for range doctorPings {
		start := time.Now()
		if err := probeStep(ctx, func(ctx context.Context) error { return c.Ping(ctx).Err() }); err != nil {
			n.err = err
			return n
		}
		n.rtts = append(n.rtts, time.Since(start))
	}
	n.offsetErr = probeStep(ctx, func(ctx context.Context) error {
		var err error
		n.offset, n.jitter, err = clockOffset(ctx, c)
		return err
	})
	n.infoErr = probeStep(ctx, func(ctx context.Context) error {
		text, err := c.Info(ctx).Result()
		n.info = parseInfo(text)
		return err
	})
	n.configErr = probeStep(ctx, func(ctx context.Context) error {
		var err error
		n.config, err = readConfig(ctx, c)
		return err
	})
	return n
}

// clockOffset compares the server's TIME with the midpoint of the round trip on this machine's
// clock, keeping the sample with the shortest round trip.
func clockOffset(ctx context.Context, c *redis.Client) (offset, jitter time.Duration, err error) {
	best := time.Duration(-1)
	for range 3 {
		before := time.Now()
		srv, err := c.Time(ctx).Result()
		rtt := time.Since(before)
		if err != nil {
			return 0, 0, err
		}
		if best < 0 || rtt < best {
			best = rtt
			offset = srv.Sub(before.Round(0).Add(rtt / 2)) // wall clocks, not the monotonic one
		}
	}
	return offset, best / 2, nil
}

func parseInfo(text string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// readConfig reads redisParams in one round trip. CONFIG may be disabled or renamed, or
// forbidden by an ACL: then it returns the server's refusal.
func readConfig(ctx context.Context, c *redis.Client) (map[string]string, error) {
	cmds := make([]*redis.MapStringStringCmd, len(redisParams))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range redisParams {
			cmds[i] = p.ConfigGet(ctx, name)
		}
		return nil
	})
	cfg := map[string]string{}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return nil, err
		}
		if v, ok := cmd.Val()[redisParams[i]]; ok {
			cfg[redisParams[i]] = v
		}
	}
	return cfg, nil
}

// setting returns a setting from CONFIG GET, or else from INFO under infoName.
func (n *redisNode) setting(name, infoName string) (string, bool) {
	if v, ok := n.config[name]; ok {
		return v, true
	}
	if infoName != "" {
		if v, ok := n.info[infoName]; ok {
			return v, true
		}
	}
	return "", false
}

// nodeFindings are the checks of one node.
func nodeFindings(n *redisNode, mode string, ttl time.Duration) []finding {
	if n.err != nil {
		return []finding{{Check: "reach", Node: n.addr, Severity: sevWarn, Message: fmt.Sprintf(
			"does not answer: %v. Locks whose keys live on it cannot be taken or renewed until it does; check that it runs and is reachable from here.", n.err)}}
	}
	var fs []finding
	if n.configErr != nil {
		fs = append(fs, finding{Check: "config", Node: n.addr, Severity: sevWarn, Message: fmt.Sprintf(
			"CONFIG GET is refused (%v): disabled, renamed or not allowed for this user. doctor falls back on INFO, which does not show appendfsync, RDB snapshots or replica-read-only; check those in redis.conf by hand.", n.configErr)})
	}
	if n.infoErr != nil {
		fs = append(fs, finding{Check: "info", Node: n.addr, Severity: sevWarn, Message: fmt.Sprintf(
			"INFO is refused (%v): role, replication and persistence can only be read from CONFIG; check them by hand.", n.infoErr)})
	}
	fs = append(fs, checkEviction(n), checkPersistence(n), checkReplication(n, mode), checkClock(n, ttl), judgeRTT(n.addr, n.rtts, ttl))
	return fs
}

func checkEviction(n *redisNode) finding {
	f := finding{Check: "eviction", Node: n.addr}
	policy, ok := n.setting("maxmemory-policy", "maxmemory_policy")
	limit := ""
	if m, _ := n.setting("maxmemory", "maxmemory"); m == "0" {
		limit = " (maxmemory is 0, no limit, so nothing is evicted today; the policy strikes the day a limit is set)"
	}
	const fix = " Set maxmemory-policy noeviction (CONFIG SET and redis.conf), or keep locks on a Redis of their own."
	switch {
	case !ok:
		f.Severity = sevWarn
		f.Message = "maxmemory-policy could not be read (CONFIG refused, INFO silent): make sure it is noeviction, since every other policy can evict a held lock."
	case policy == "noeviction":
		f.Severity = sevOK
		f.Message = "maxmemory-policy noeviction: when memory runs out, new locks fail with an OOM error; no held lock is evicted."
	case strings.HasPrefix(policy, "allkeys-"):
		f.Severity = sevFail
		f.Message = fmt.Sprintf("maxmemory-policy %s evicts any key when memory is full, lock keys included: a held lock vanishes and a second holder takes it%s.%s", policy, limit, fix)
	case strings.HasPrefix(policy, "volatile-"):
		f.Severity = sevFail
		f.Message = fmt.Sprintf("maxmemory-policy %s evicts keys that have a TTL when memory is full, and every lock key has one: a held lock vanishes and a second holder takes it%s.%s", policy, limit, fix)
	default:
		f.Severity = sevWarn
		f.Message = fmt.Sprintf("maxmemory-policy %s is unknown to doctor: every policy but noeviction can evict a held lock.", policy)
	}
	return f
}

func checkPersistence(n *redisNode) finding {
	f := finding{Check: "persistence", Node: n.addr}
	aof, ok := n.config["appendonly"]
	if !ok {
		if v, found := n.info["aof_enabled"]; found {
			aof, ok = map[string]string{"1": "yes", "0": "no"}[v], true
		}
	}
	fsync := n.config["appendfsync"]
	save, saveOK := n.config["save"]
	const delay = " or keep a restarted server out of use for one TTL, so that every lock it forgot has expired anyway."
	switch {
	case !ok:
		f.Severity = sevWarn
		f.Message = "appendonly could not be read (CONFIG refused, INFO silent): without AOF a restart loses held locks; check redis.conf."
	case aof == "yes" && fsync == "always":
		f.Severity = sevOK
		f.Message = "appendonly yes, appendfsync always: every lock is on disk before Redis acknowledges it, so a restart keeps held locks and fence counters."
	case aof == "yes" && fsync == "everysec":
		f.Severity = sevInfo
		f.Message = "appendonly yes, appendfsync everysec: a crash of the server or its machine can lose up to the last second of acknowledged locks, which the restarted server then hands out again. Set appendfsync always where that matters," + delay
	case aof == "yes" && fsync == "no":
		f.Severity = sevWarn
		f.Message = "appendonly yes, appendfsync no: the OS decides when the log reaches the disk (about every 30s on Linux), so a machine crash can lose that much of acknowledged locks, which the restarted server hands out again. Set appendfsync always (or everysec)," + delay
	case aof == "yes":
		f.Severity = sevInfo
		f.Message = "appendonly yes; appendfsync could not be read: with always a restart keeps every lock, with everysec up to 1s of locks can be lost, with no about 30s."
	case !saveOK:
		f.Severity = sevWarn
		f.Message = "appendonly no, and RDB snapshots could not be read (CONFIG refused): a restart loses at least every lock taken since the last snapshot, and their holders keep working while others take them again. Turn on appendonly yes with appendfsync always," + delay
	case strings.TrimSpace(save) == "":
		f.Severity = sevWarn
		f.Message = "persistence is off (appendonly no, no RDB snapshots): a restart empties the server: held locks vanish, and fencing counters restart from the server clock. Turn on appendonly yes with appendfsync always," + delay
	default:
		f.Severity = sevWarn
		f.Message = fmt.Sprintf("appendonly no, RDB snapshots only (save %q): a restart goes back to the last snapshot, so locks taken since vanish and can be taken again while their holders still work. Turn on appendonly yes with appendfsync always,", save) + delay
	}
	return f
}

func checkReplication(n *redisNode, mode string) finding {
	f := finding{Check: "replication", Node: n.addr}
	switch n.info["role"] {
	case "master":
		replicas, _ := strconv.Atoi(n.info["connected_slaves"])
		minw, known := n.config["min-replicas-to-write"]
		if !known {
			// INFO shows min_slaves_good_slaves only while min-replicas-to-write is set.
			minw = "0"
			if _, set := n.info["min_slaves_good_slaves"]; set {
				minw = "at least 1"
			}
		}
		lag := n.config["min-replicas-max-lag"]
		switch {
		case replicas == 0:
			f.Severity = sevInfo
			f.Message = "no replicas: no failover can hand a lock out twice, but while this server is down no lock on it can be taken or renewed."
		case minw == "0":
			f.Severity = sevInfo
			if mode != modeSingle {
				f.Severity = sevWarn // failover is automatic here
			}
			f.Message = fmt.Sprintf("%d %s, min-replicas-to-write 0: replication is asynchronous, so a lock this master acknowledged may not have reached a replica when it fails; the promoted replica then grants the lock to a second holder, and can repeat its fencing token. Set min-replicas-to-write 1 (with min-replicas-max-lag) so that a master cut off from its replicas stops taking locks, and obtain with redisbackend.WithReplicas(1, timeout) so that each lock waits for a replica to acknowledge it.",
				replicas, plural(replicas, "replica", "replicas"))
		default:
			f.Severity = sevInfo
			within := ""
			if lag != "" {
				within = " within " + lag + "s"
			}
			f.Message = fmt.Sprintf("%d %s, min-replicas-to-write %s: a master cut off from its replicas stops taking locks%s. Replication is still asynchronous: obtain with redisbackend.WithReplicas(n, timeout) so that each lock waits for replicas to acknowledge it before it is handed out.",
				replicas, plural(replicas, "replica", "replicas"), minw, within)
		}
	case "slave":
		master := net.JoinHostPort(n.info["master_host"], n.info["master_port"])
		link := n.info["master_link_status"]
		switch {
		case mode == modeSingle && n.config["replica-read-only"] == "no":
			f.Severity = sevFail
			f.Message = fmt.Sprintf("a writable replica of %s: locks taken here live only on this replica, unseen by holders on the master, and the next full sync wipes them. Point --backend at the master, or use redis+sentinel:// so that clients follow failovers.", master)
		case mode == modeSingle:
			f.Severity = sevWarn
			f.Message = fmt.Sprintf("a read-only replica of %s: every lock attempt fails with READONLY. Point --backend at the master, or use redis+sentinel:// so that clients follow failovers.", master)
		case link != "up":
			f.Severity = sevWarn
			f.Message = fmt.Sprintf("replica of %s with its link %s: promoting it now would lose every lock taken since the link went down.", master, cmp.Or(link, "unknown"))
		default:
			f.Severity = sevInfo
			f.Message = fmt.Sprintf("replica of %s, link up: a failover candidate; what it has not received when the master fails is lost (see the master's replication finding).", master)
		}
	case "":
		f.Severity = sevWarn
		f.Message = "the role could not be read from INFO: check by hand whether this server is a master, and whether its replicas acknowledge locks."
	default:
		f.Severity = sevInfo
		f.Message = fmt.Sprintf("role %s.", n.info["role"])
	}
	return f
}

// checkClock judges the server clock's offset from this machine's against the TTL. Redis
// expires keys by its wall clock, so a clock that is off will be corrected one day, and a
// correcting step moves every lock's expiry by as much.
func checkClock(n *redisNode, ttl time.Duration) finding {
	f := finding{Check: "clock", Node: n.addr}
	if n.offsetErr != nil {
		f.Severity = sevWarn
		f.Message = fmt.Sprintf("TIME is refused (%v): the server clock could not be compared with this machine's.", n.offsetErr)
		return f
	}
	abs, dir := n.offset, "ahead of"
	if abs < 0 {
		abs, dir = -abs, "behind"
	}
	lower := max(abs-n.jitter, 0) // the least the clocks can be apart
	detail := fmt.Sprintf("server clock %v %s this machine's (±%v)", roundDur(abs), dir, roundDur(n.jitter))
	switch {
	case lower > ttl/3:
		f.Severity = sevFail
		f.Message = fmt.Sprintf("%s: more than a third of the %v TTL. Redis expires keys by its wall clock, so the step that corrects a clock this far off makes locks expire that much early, before the watchdog renews them, and fencing tokens lean on the server clock too. Synchronise the clocks of servers and clients (NTP, chrony), slewing rather than stepping.", detail, ttl)
	case lower > ttl/10 || lower > time.Second:
		f.Severity = sevWarn
		f.Message = fmt.Sprintf("%s: clocks this far apart are not kept in sync, and the step that corrects one moves every lock's expiry by as much. Synchronise them (NTP, chrony).", detail)
	default:
		f.Severity = sevOK
		f.Message = fmt.Sprintf("%s: close enough for a %v TTL.", detail, ttl)
	}
	return f
}
