package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

// Sentinel is a master, a replica and one Redis Sentinel monitoring them.
// One sentinel with quorum 1 is enough: a forced failover (SENTINEL FAILOVER)
// needs no agreement, and after a crash the lone sentinel is its own majority,
// so automatic failover works too (down-after-milliseconds is 1000).
type Sentinel struct {
	MasterName string
	// Master and Replica are the initial roles; they swap on failover (use
	// CurrentMaster and Node). Restart replays a node's initial arguments, so
	// a restarted initial replica points at the initial master again until
	// the sentinel reconfigures it.
	Master, Replica *Redis
	Sentinels       []*Redis
	SentinelAddrs   []string
}

// StartSentinel starts a master, a replica and a sentinel and stops them when
// the test ends. It returns once the replica is in sync and the sentinel
// knows it, so a failover can happen right away.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s, err := NewSentinel()
	if err != nil {
		t.Fatalf("%v", err)
	}
	procs := []*process{s.Master.proc, s.Replica.proc}
	for _, sn := range s.Sentinels {
		procs = append(procs, sn.proc)
	}
	cleanupOnEnd(t, s.Close, procs...)
	return s
}

// NewSentinel is StartSentinel without a testing.TB; the caller must Close it.
func NewSentinel() (*Sentinel, error) {
	// Fail before starting anything when the sentinel binary is missing.
	if _, err := redisBinary(true); err != nil {
		return nil, err
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

	// Both data nodes get the fast-sync settings because roles swap on
	// failover: a diskless sync without delay takes milliseconds.
	replArgs := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	var err error
	if s.Master, err = NewRedis(replArgs...); err != nil {
		return nil, err
	}
	// Sentinel reconfigures nodes with the address it monitors, so everything
	// uses 127.0.0.1 consistently.
	if s.Replica, err = NewRedis(append(replArgs, "--replicaof", "127.0.0.1", fmt.Sprint(s.Master.Port))...); err != nil {
		return nil, err
	}
	// The sentinel discovers replicas from the master's INFO, which it reads
	// on connect and then only every 10s; waiting for replication first makes
	// discovery immediate.
	if err := waitReplicated(ctx, s.Master.Addr); err != nil {
		return nil, err
	}
	sn, err := newRedisServer(redisSpec{
		kind:     "sentinel",
		sentinel: true,
		prepare: func(dir string) ([]string, error) {
			// Sentinel insists on a writable config file it can rewrite.
			conf := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s 127.0.0.1 %[2]d 1
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
`, s.MasterName, s.Master.Port)
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
	if err := s.waitReplicaKnown(ctx, s.Replica.Addr); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// waitReplicated waits until a write on the master reaches a replica. A
// replica reporting master_link_status:up is not enough: after a diskless
// sync the master holds back the command stream until the replica's first
// ACK (up to a second later), and a failover in that window loses the writes.
// The probe key is deleted again, so the dataset stays as the test left it.
func waitReplicated(ctx context.Context, master string) error {
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
			n, err := c.Wait(ctx, 1, 100*time.Millisecond).Result()
			if err != nil {
				return err
			}
			if n < 1 {
				return errors.New("no replica acknowledged a write")
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
	for _, r := range []*Redis{s.Master, s.Replica} {
		if r != nil {
			errs = append(errs, r.Close())
		}
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

// Node returns the data node (Master or Replica) listening on addr, or nil.
func (s *Sentinel) Node(addr string) *Redis {
	for _, r := range []*Redis{s.Master, s.Replica} {
		if r != nil && r.Addr == addr {
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
	var newMaster string
	for {
		lastErr := withTimeout(ctx, time.Second, func(ctx context.Context) error {
			cur, err := s.CurrentMaster(ctx)
			if err != nil {
				return err
			}
			if cur == old {
				return fmt.Errorf("sentinel still reports %s", old)
			}
			newMaster = cur
			if err := checkRole(ctx, cur, "master"); err != nil {
				return err
			}
			demoted, err := demote(ctx, old, cur)
			if err != nil {
				return err
			}
			if demoted {
				// So a write acknowledged after Failover survives the next
				// failover.
				return waitReplicated(ctx, cur)
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
