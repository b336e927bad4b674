package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// SentinelMasterName is the name the sentinels monitor the master under.
	SentinelMasterName = "fencelock"
	// failoverTimeout bounds Failover; a forced failover with the settings
	// below normally completes in about a second.
	failoverTimeout = 30 * time.Second
	// sentinelReadyTimeout bounds NewSentinel's wait for replication and for
	// the sentinel to discover the replica.
	sentinelReadyTimeout = 30 * time.Second
)

// Sentinel is a master, its replicas and one Redis Sentinel monitoring them.
// One sentinel with quorum 1 is enough: a forced failover (SENTINEL FAILOVER)
// needs no agreement, and after a crash the lone sentinel is its own majority,
// so automatic failover works too (down-after-milliseconds is 1000).
type Sentinel struct {
	MasterName string
	// Master and Replica are the initial roles; they swap on failover (use
	// CurrentMaster and Node). Restart replays a node's initial arguments, so
	// a restarted initial replica points at the initial master again until
	// the sentinel reconfigures it (unless Proxied: the proxies are made
	// after the nodes, so a restarted node comes back as a master). Replicas lists every initial replica;
	// Replica is the first.
	Master, Replica *Redis
	Replicas        []*Redis
	Sentinels       []*Redis
	SentinelAddrs   []string

	proxies map[*Redis]*Proxy // with SentinelConfig.Proxied
}

// SentinelConfig shapes a Sentinel deployment; the zero value is what
// StartSentinel starts.
type SentinelConfig struct {
	Replicas int      // replicas of the master; 0 means 1
	DataArgs []string // extra redis-server arguments for every data node (roles swap at a failover)
	// Proxied puts a Proxy in front of every data node and makes the node
	// announce it (replica-announce-port): the sentinel, the replication
	// links and the clients the sentinel routes all reach a node through its
	// proxy, while a client dialling the node's own Addr does not. Cutting or
	// blackholing a node's proxy partitions it from the rest of the
	// deployment but not from its direct clients. The addresses the sentinel
	// reports (CurrentMaster, Failover) are then proxy addresses; Node maps
	// them back.
	Proxied bool
}

// StartSentinel starts a master, a replica and a sentinel and stops them when
// the test ends. It returns once the replica is in sync and the sentinel
// knows it, so a failover can happen right away.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return StartSentinelConfig(t, SentinelConfig{})
}

// StartSentinelConfig is StartSentinel for the deployment cfg describes.
func StartSentinelConfig(t testing.TB, cfg SentinelConfig) *Sentinel {
	t.Helper()
	s, err := NewSentinelConfig(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	procs := []*process{s.Master.proc}
	for _, r := range s.Replicas {
		procs = append(procs, r.proc)
	}
	for _, sn := range s.Sentinels {
		procs = append(procs, sn.proc)
	}
	cleanupOnEnd(t, s.Close, procs...)
	return s
}

// NewSentinel is StartSentinel without a testing.TB; the caller must Close it.
func NewSentinel() (*Sentinel, error) { return NewSentinelConfig(SentinelConfig{}) }

// NewSentinelConfig is StartSentinelConfig without a testing.TB; the caller
// must Close it.
func NewSentinelConfig(cfg SentinelConfig) (*Sentinel, error) {
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	s := &Sentinel{MasterName: SentinelMasterName}
	ok := false
	defer func() {
		if !ok {
			_ = s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()

	// Every data node gets the fast-sync settings because roles swap on
	// failover: a diskless sync without delay takes milliseconds.
	dataArgs := append([]string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, cfg.DataArgs...)
	var err error
	if s.Master, err = NewRedis(dataArgs...); err != nil {
		return nil, err
	}
	for range cfg.Replicas {
		args := dataArgs
		if !cfg.Proxied {
			// On the command line, so a restarted replica comes back as one.
			args = append(slices.Clip(args), "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port))
		}
		r, err := NewRedis(args...)
		if err != nil {
			return nil, err
		}
		s.Replicas = append(s.Replicas, r)
	}
	s.Replica = s.Replicas[0]
	if cfg.Proxied {
		s.proxies = make(map[*Redis]*Proxy)
		for _, r := range s.nodes() {
			p, err := NewProxy(r.Addr)
			if err != nil {
				return nil, err
			}
			s.proxies[r] = p
			_, port, _ := net.SplitHostPort(p.Addr)
			if err := configSet(ctx, r.Addr, "replica-announce-ip", "127.0.0.1", "replica-announce-port", port); err != nil {
				return nil, err
			}
		}
	}
	// Sentinel reconfigures nodes with the address it monitors, so everything
	// uses 127.0.0.1 consistently.
	master := s.announced(s.Master)
	host, port, _ := net.SplitHostPort(master)
	if cfg.Proxied {
		for _, r := range s.Replicas {
			if err := replicaOf(ctx, r.Addr, host, port); err != nil {
				return nil, err
			}
		}
	}
	// The sentinel discovers replicas from the master's INFO, which it reads
	// on connect and then only every 10s; waiting for replication first makes
	// discovery immediate.
	if err := waitReplicatedN(ctx, s.Master.Addr, len(s.Replicas)); err != nil {
		return nil, err
	}
	sn, err := newRedisServer(redisSpec{
		kind:     "sentinel",
		sentinel: true,
		prepare: func(dir string) ([]string, error) {
			// Sentinel insists on a writable config file it can rewrite.
			conf := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s %[2]s %[3]s 1
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
`, s.MasterName, host, port)
			if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
				return nil, fmt.Errorf("testserver: %w", err)
			}
			return []string{conf}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	s.Sentinels = append(s.Sentinels, sn)
	s.SentinelAddrs = append(s.SentinelAddrs, sn.Addr)
	for _, r := range s.Replicas {
		if err := s.waitReplicaKnown(ctx, s.announced(r)); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// nodes returns the data nodes: the initial master, then the replicas.
func (s *Sentinel) nodes() []*Redis {
	var out []*Redis
	if s.Master != nil {
		out = append(out, s.Master)
	}
	return append(out, s.Replicas...)
}

// announced is the address the deployment knows r by: its proxy's when
// Proxied, else its own.
func (s *Sentinel) announced(r *Redis) string {
	if p := s.proxies[r]; p != nil {
		return p.Addr
	}
	return r.Addr
}

// Proxy returns the proxy in front of the data node r (nil unless Proxied).
func (s *Sentinel) Proxy(r *Redis) *Proxy { return s.proxies[r] }

func configSet(ctx context.Context, addr string, pairs ...string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	args := []any{"CONFIG", "SET"}
	for _, p := range pairs {
		args = append(args, p)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("testserver: CONFIG SET on %s: %w", addr, err)
	}
	return nil
}

func replicaOf(ctx context.Context, addr, host, port string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		return fmt.Errorf("testserver: REPLICAOF %s %s on %s: %w", host, port, addr, err)
	}
	return nil
}

// waitReplicated waits until a write on the master reaches a replica. A
// replica reporting master_link_status:up is not enough: after a diskless
// sync the master holds back the command stream until the replica's first
// ACK (up to a second later), and a failover in that window loses the writes.
// The probe key is deleted again, so the dataset stays as the test left it.
func waitReplicated(ctx context.Context, master string) error {
	return waitReplicatedN(ctx, master, 1)
}

// waitReplicatedN is waitReplicated for n replicas.
func waitReplicatedN(ctx context.Context, master string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: master, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	const probe = "testserver:replication-probe"
	for {
		err := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			if err := c.Set(ctx, probe, "1", 0).Err(); err != nil {
				return err
			}
			if err := c.Del(ctx, probe).Err(); err != nil {
				return err
			}
			got, err := c.Wait(ctx, n, 100*time.Millisecond).Result()
			if err != nil {
				return err
			}
			if got < int64(n) {
				return fmt.Errorf("%d of %d replicas acknowledged a write", got, n)
			}
			return nil
		})
		if err == nil {
			return nil
		}
		if sleepCtx(ctx, 10*time.Millisecond) != nil {
			return fmt.Errorf("testserver: writes on %s never reached a replica: %v", master, err)
		}
	}
}

// waitReplicaKnown waits until every sentinel lists addr as a healthy replica;
// before that SENTINEL FAILOVER answers NOGOODSLAVE.
func (s *Sentinel) waitReplicaKnown(ctx context.Context, addr string) error {
	var lastErr error
	for {
		lastErr = nil
		for _, sn := range s.Sentinels {
			if err := withTimeout(ctx, time.Second, func(ctx context.Context) error {
				return replicaHealthy(ctx, sn, s.MasterName, addr)
			}); err != nil {
				lastErr = err
				break
			}
		}
		if lastErr == nil {
			return nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("testserver: sentinel never saw replica %s: %v", addr, lastErr)
		}
	}
}

func replicaHealthy(ctx context.Context, sn *Redis, name, addr string) error {
	c := sentinelClient(sn.Addr)
	defer c.Close()
	replicas, err := c.Replicas(ctx, name).Result()
	if err != nil {
		return fmt.Errorf("sentinel %s: %w", sn.Addr, err)
	}
	for _, r := range replicas {
		if net.JoinHostPort(r["ip"], r["port"]) != addr {
			continue
		}
		if r["flags"] != "slave" || r["master-link-status"] != "ok" {
			return fmt.Errorf("sentinel %s: replica %s flags=%s master-link-status=%s",
				sn.Addr, addr, r["flags"], r["master-link-status"])
		}
		return nil
	}
	return fmt.Errorf("sentinel %s: replica %s not listed", sn.Addr, addr)
}

func sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// Close stops the sentinels first (so they do not react to the data nodes
// going away), then the data nodes. It is idempotent.
func (s *Sentinel) Close() error {
	var errs []error
	for _, sn := range s.Sentinels {
		errs = append(errs, sn.Close())
	}
	for _, r := range s.nodes() {
		errs = append(errs, r.Close())
	}
	for _, p := range s.proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Client returns a new sentinel-backed failover client that honours context
// deadlines; the caller closes it.
func (s *Sentinel) Client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName,
		SentinelAddrs:         s.SentinelAddrs,
		ContextTimeoutEnabled: true,
	})
}

// ClientT is Client closed automatically when the test ends.
func (s *Sentinel) ClientT(t testing.TB) *redis.Client {
	c := s.Client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Node returns the data node listening on addr, or behind the proxy at addr;
// nil if none.
func (s *Sentinel) Node(addr string) *Redis {
	for _, r := range s.nodes() {
		if r.Addr == addr || s.announced(r) == addr {
			return r
		}
	}
	return nil
}

// CurrentMaster asks the sentinels (the first that answers) for the master's
// address.
func (s *Sentinel) CurrentMaster(ctx context.Context) (string, error) {
	var errs []error
	for _, sn := range s.Sentinels {
		c := sentinelClient(sn.Addr)
		hp, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
		c.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		if err == nil {
			err = fmt.Errorf("unexpected reply %q", hp)
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", sn.Addr, err))
	}
	return "", fmt.Errorf("testserver: get-master-addr-by-name: %w", errors.Join(errs...))
}

// Failover forces a failover and waits until the sentinels report a different
// master that itself answers ROLE as master. It then demotes the old master,
// if it still answers, to a replica of the new one (see demote), so no write
// can land on it after Failover returns. It returns the new master's address
// and waits at most 30s (or until ctx is done).
func (s *Sentinel) Failover(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	old, err := s.CurrentMaster(ctx)
	if err != nil {
		return "", err
	}
	newMaster, err := s.ForceFailover(ctx)
	if err != nil {
		return "", err
	}
	for {
		lastErr := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			demoted, err := demote(ctx, old, newMaster)
			if err != nil {
				return err
			}
			if demoted {
				// So a write acknowledged after Failover survives the next
				// failover.
				return waitReplicated(ctx, newMaster)
			}
			return nil
		})
		if lastErr == nil {
			return newMaster, nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return "", fmt.Errorf("testserver: failover from %s did not complete: %v", old, lastErr)
		}
	}
}

// ForceFailover is Failover without the demotion: the old master keeps its
// role (and takes writes from clients that reach it) until the sentinel
// reconfigures it, about 8s after it can reach it again, or Demote. It is how
// a failover looks to a master cut off from the sentinels.
func (s *Sentinel) ForceFailover(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	old, err := s.CurrentMaster(ctx)
	if err != nil {
		return "", err
	}
	sc := sentinelClient(s.SentinelAddrs[0])
	defer sc.Close()
	// NOGOODSLAVE and INPROG are transient: right after startup or a previous
	// failover the sentinel may not yet trust the replica.
	for {
		err := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			return sc.Failover(ctx, s.MasterName).Err()
		})
		if err == nil {
			break
		}
		if msg := err.Error(); !strings.Contains(msg, "NOGOODSLAVE") && !strings.Contains(msg, "INPROG") {
			return "", fmt.Errorf("testserver: SENTINEL FAILOVER: %w", err)
		}
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return "", fmt.Errorf("testserver: SENTINEL FAILOVER kept failing: %w", err)
		}
	}
	for {
		var newMaster string
		lastErr := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			cur, err := s.CurrentMaster(ctx)
			if err != nil {
				return err
			}
			if cur == old {
				return fmt.Errorf("sentinel still reports %s", old)
			}
			newMaster = cur
			return checkRole(ctx, cur, "master")
		})
		if lastErr == nil {
			return newMaster, nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return "", fmt.Errorf("testserver: failover from %s did not complete: %v", old, lastErr)
		}
	}
}

// Demote makes the node the deployment knows as addr a replica of the
// current master, as the sentinel would itself about 8s after reaching it,
// and waits until it is in sync.
func (s *Sentinel) Demote(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	cur, err := s.CurrentMaster(ctx)
	if err != nil {
		return err
	}
	if cur == addr {
		return fmt.Errorf("testserver: %s is the current master", addr)
	}
	for {
		lastErr := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			if _, err := demote(ctx, addr, cur); err != nil {
				return err
			}
			return waitReplicatedN(ctx, cur, len(s.Replicas))
		})
		if lastErr == nil {
			return nil
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("testserver: demote %s: %v", addr, lastErr)
		}
	}
}

// demote makes the old master a replica of the new one, if it answers.
//
// Until demoted, the old master still accepts writes, which its resync then
// discards, so Failover must not return before. The sentinel would send this
// same REPLICAOF itself, but only after a hard-coded grace of 8s after
// noticing the stale role (about 11s per failover here); sending it now
// yields the same topology without the wait. A dead or paused old master
// takes no writes, so it is left to the sentinel.
// It reports whether the old master is now a replica.
func demote(ctx context.Context, old, newMaster string) (bool, error) {
	err := checkRole(ctx, old, "slave")
	if err == nil {
		return true, nil
	}
	if errors.Is(err, errNoAnswer) {
		return false, nil
	}
	host, port, _ := net.SplitHostPort(newMaster)
	c := redis.NewClient(&redis.Options{Addr: old, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		return false, fmt.Errorf("REPLICAOF %s on the old master %s: %w", newMaster, old, err)
	}
	return true, checkRole(ctx, old, "slave")
}

// errNoAnswer marks a node that did not answer ROLE at all.
var errNoAnswer = errors.New("no answer")

func checkRole(ctx context.Context, addr, want string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	// A paused node must not eat the whole polling budget.
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return fmt.Errorf("ROLE on %s: %w (%v)", addr, errNoAnswer, err)
	}
	if len(role) == 0 || role[0] != want {
		return fmt.Errorf("%s answers ROLE %v, want %s", addr, role, want)
	}
	return nil
}
