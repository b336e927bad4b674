package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// The sizing scenario answers "how far does one deployment carry us": for each backend and
// deployment, callers goroutines of one Client cycle TryObtain and Release, each on a name of
// its own (so names spread over a Cluster's slots), for a step of cfg.sizingStep at each count
// of callers, and the step's cycles/s, latency and the servers' CPU per cycle are recorded.
// fencelock runs as a user gets it: defaults, the watchdog on.

// sizingTarget is one deployment of one backend.
type sizingTarget struct {
	backend string // "Redis", "etcd", "ZooKeeper": a chart each
	label   string // the deployment, such as "1 node"
	note    string
	open    func(ctx context.Context, pinTo int) (*sizingSetup, error)
}

// sizingSetup is a started deployment with a Client over it.
type sizingSetup struct {
	c *fencelock.Client
	// pids are the server processes whose CPU is counted; none when the servers run in this
	// process, whose CPU is the client's too.
	pids  []int
	close func()
}

// sizingPoint is one step: callers goroutines for one step's time.
type sizingPoint struct {
	callers   int
	cycles    int64
	perSec    float64
	p50, p99  time.Duration
	serverCPU time.Duration // per cycle, over every server process; 0 when not measured
	failures  int64
	firstErr  error
}

// sizingRow is one target's steps, or why it could not run.
type sizingRow struct {
	target *sizingTarget
	points []sizingPoint
	held   *sizingHeld // nil when the step did not run
	err    error
}

// sizingHeld is what holding many locks costs: the watchdog renewing them, and memory.
type sizingHeld struct {
	locks       int
	obtained    time.Duration // to obtain them all
	held        time.Duration // how long they were held and measured
	clientCPU   time.Duration // this process's, over held
	serverCPU   time.Duration // every server process's, over held; 0 when not measured
	heapPerLock float64       // this process's Go heap, bytes per held lock
	lost        int
	err         error
}

// sizingHoldTTL is the held locks' TTL: etcd's least lease TTL is 2 s, so every backend gets
// one above it; the watchdog renews every TTL/3.
const sizingHoldTTL = 3 * time.Second

// sizingZKSession is the ZooKeeper session timeout asked for.
const sizingZKSession = 10 * time.Second

// sizingRTT is the round trip a LAN adds (0.2-0.5 ms): the proxy delays each direction by half.
const sizingRTT = 500 * time.Microsecond

func sizingTargets(redisAddr string, redisPID int) []*sizingTarget {
	// over is a Client over rdb; closing it closes rdb, then closeExtra (the servers, a proxy).
	over := func(rdb redis.UniversalClient, pids []int, closeExtra func()) (*sizingSetup, error) {
		b := redisbackend.New(rdb)
		c := fencelock.New(b)
		return &sizingSetup{c: c, pids: pids, close: func() {
			_ = c.Close()
			_ = b.Close()
			_ = rdb.Close()
			if closeExtra != nil {
				closeExtra()
			}
		}}, nil
	}
	return []*sizingTarget{
		{backend: "Redis", label: "1 node",
			note: "redisbackend on one go-redis client (defaults) to one redis-server, persistence off",
			open: func(context.Context, int) (*sizingSetup, error) {
				return over(redis.NewClient(&redis.Options{Addr: redisAddr}), []int{redisPID}, nil)
			}},
		{backend: "Redis", label: "1 node, 0.5 ms RTT",
			note: "as above, through a TCP proxy in this program that delays each direction by 0.25 ms, a LAN's round trip; the proxy's CPU is the client's",
			open: func(context.Context, int) (*sizingSetup, error) {
				p, err := testserver.NewProxy(redisAddr)
				if err != nil {
					return nil, err
				}
				p.SetDelay(sizingRTT / 2)
				return over(redis.NewClient(&redis.Options{Addr: p.Addr}), []int{redisPID}, func() { _ = p.Close() })
			}},
		{backend: "Redis", label: "Cluster, 3 masters",
			note: "redisbackend on one go-redis ClusterClient (defaults) to a Redis Cluster of 3 masters, no replicas, on the same CPU as the single node; the callers' names spread over the slots, so over the masters",
			open: func(_ context.Context, pinTo int) (*sizingSetup, error) {
				cl, err := testserver.NewCluster(3)
				if err != nil {
					return nil, err
				}
				var pids []int
				for _, n := range cl.Nodes {
					pids = append(pids, n.PID())
					if pinTo >= 0 {
						if err := pinProcess(n.PID(), pinTo); err != nil {
							_ = cl.Close()
							return nil, err
						}
					}
				}
				return over(redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs}), pids, func() { _ = cl.Close() })
			}},
		{backend: "etcd", label: "1 member",
			note: "etcdbackend (defaults) on one clientv3 client to one etcd member in a process of its own, fsync on, its data on this machine's disk",
			open: func(_ context.Context, pinTo int) (*sizingSetup, error) { return openEtcd(1, pinTo) }},
		{backend: "etcd", label: "3 members",
			note: "as above, to a cluster of 3 members, each a process of its own, one client of all 3",
			open: func(_ context.Context, pinTo int) (*sizingSetup, error) { return openEtcd(3, pinTo) }},
		{backend: "ZooKeeper", label: "1 server",
			note: "zkbackend (defaults) on one go-zookeeper session to one ZooKeeper server (Debian's), fsync on (forceSync=yes, its default)",
			open: func(_ context.Context, pinTo int) (*sizingSetup, error) {
				s, err := zktest.New(zkOptions(pinTo))
				if err != nil {
					return nil, err
				}
				return openZK([]string{s.Addr}, []int{s.PID()}, func() { _ = s.Close() })
			}},
		{backend: "ZooKeeper", label: "3 servers",
			note: "as above, to an ensemble of 3 servers, each a process of its own, one session to all 3",
			open: func(_ context.Context, pinTo int) (*sizingSetup, error) {
				e, err := zktest.NewEnsemble(3, zkOptions(pinTo))
				if err != nil {
					return nil, err
				}
				return openZK(e.Addrs, e.PIDs(), func() { _ = e.Close() })
			}},
	}
}

// openEtcd starts a cluster of members, each in a process of its own (pinned to pinTo unless it
// is -1), fsync on, and makes a Client over one client of them all.
func openEtcd(members, pinTo int) (*sizingSetup, error) {
	opts := etcdtest.Options{Process: true, Members: members}
	if pinTo >= 0 {
		opts.CPU = strconv.Itoa(pinTo)
	}
	cl, err := etcdtest.New(opts)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		cl.Close()
		return nil, err
	}
	b := etcdbackend.New(cli)
	c := fencelock.New(b)
	return &sizingSetup{c: c, pids: cl.PIDs(), close: func() {
		_ = c.Close()
		_ = b.Close()
		_ = cli.Close()
		cl.Close()
	}}, nil
}

// zkOptions are the ZooKeeper servers' options: fsync on, pinned to pinTo unless it is -1.
func zkOptions(pinTo int) zktest.Options {
	opts := zktest.Options{Fsync: true}
	if pinTo >= 0 {
		opts.CPU = strconv.Itoa(pinTo)
	}
	return opts
}

// openZK is a Client over one session to the servers at addrs; closing it closes the session,
// then stop (the servers).
func openZK(addrs []string, pids []int, stop func()) (*sizingSetup, error) {
	conn, events, err := zk.Connect(addrs, sizingZKSession, zk.WithLogger(zkQuiet{}), zk.WithDialer(net.DialTimeout))
	if err != nil {
		stop()
		return nil, err
	}
	if err := awaitSession(events, sizingZKSession); err != nil {
		conn.Close()
		stop()
		return nil, err
	}
	b := zkbackend.New(conn, zkbackend.WithSessionTimeout(sizingZKSession))
	c := fencelock.New(b)
	return &sizingSetup{c: c, pids: pids, close: func() {
		_ = c.Close()
		_ = b.Close()
		conn.Close()
		stop()
	}}, nil
}

// awaitSession waits until a ZooKeeper connection has its session.
func awaitSession(events <-chan zk.Event, bound time.Duration) error {
	timeout := time.After(bound)
	for {
		select {
		case e := <-events:
			if e.State == zk.StateHasSession {
				return nil
			}
		case <-timeout:
			return errors.New("no ZooKeeper session within " + bound.String())
		}
	}
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// runSizing runs every target through cfg.sizingCallers.
func runSizing(ctx context.Context, cfg *config, redisAddr string, redisPID, pinTo int) []sizingRow {
	var rows []sizingRow
	for _, t := range sizingTargets(redisAddr, redisPID) {
		cfg.progress("sizing: %s, %s", t.backend, t.label)
		row := sizingRow{target: t}
		row.points, row.held, row.err = sizeTarget(ctx, cfg, t, pinTo)
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows
}

func sizeTarget(ctx context.Context, cfg *config, t *sizingTarget, pinTo int) ([]sizingPoint, *sizingHeld, error) {
	s, err := t.open(ctx, pinTo)
	if err != nil {
		return nil, nil, err
	}
	defer s.close()
	for k := range cfg.warmup {
		if err := sizingCycle(ctx, s.c, "size:warm:"+strconv.Itoa(k)); err != nil {
			return nil, nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var points []sizingPoint
	for _, n := range cfg.sizingCallers {
		if err := ctx.Err(); err != nil {
			return points, nil, err
		}
		points = append(points, sizeStep(ctx, cfg, s, n))
	}
	return points, holdStep(ctx, cfg, s), nil
}

// holdStep obtains cfg.watchdogLocks locks, holds them for cfg.watchdogIntervals renewal
// intervals while the watchdog renews them, and measures the CPU that costs, and the memory.
func holdStep(ctx context.Context, cfg *config, s *sizingSetup) *sizingHeld {
	h := &sizingHeld{locks: cfg.watchdogLocks}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	locks := make([]*fencelock.Lock, cfg.watchdogLocks)
	start := time.Now()
	var errOnce sync.Once
	inParallel(len(locks), func(i int) bool {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := s.c.TryObtain(octx, "held:"+strconv.Itoa(i), fencelock.WithTTL(sizingHoldTTL))
		cancel()
		if err != nil {
			errOnce.Do(func() { h.err = err })
			return false
		}
		locks[i] = l
		return true
	})
	h.obtained = time.Since(start)
	defer func() {
		// Given back as they were taken, by many callers: one at a time, 10,000 releases on a
		// store that syncs each to disk would take minutes.
		inParallel(len(locks), func(i int) bool {
			if locks[i] != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = locks[i].Release(rctx)
				cancel()
			}
			return true
		})
	}()
	if h.err != nil {
		return h
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	h.heapPerLock = float64(int64(m1.HeapAlloc+m1.StackInuse)-int64(m0.HeapAlloc+m0.StackInuse)) / float64(len(locks))
	server0 := 0.0
	for _, pid := range s.pids {
		server0 += procCPU(pid)
	}
	client0 := cpuTime()
	begin := time.Now()
	if err := sleep(ctx, time.Duration(cfg.watchdogIntervals)*sizingHoldTTL/3); err != nil {
		h.err = err
		return h
	}
	h.held = time.Since(begin)
	h.clientCPU = time.Duration((cpuTime() - client0) * 1e9)
	server := 0.0
	for _, pid := range s.pids {
		server += procCPU(pid)
	}
	if len(s.pids) > 0 {
		h.serverCPU = time.Duration((server - server0) * 1e9)
	}
	for _, l := range locks {
		if l.Valid() != nil {
			h.lost++
		}
	}
	return h
}

// sizeStep runs n callers for one step.
func sizeStep(ctx context.Context, cfg *config, s *sizingSetup, n int) sizingPoint {
	p := sizingPoint{callers: n}
	lat := make([]durations, n)
	var failures atomic.Int64
	var errOnce sync.Once
	server0 := 0.0
	for _, pid := range s.pids {
		server0 += procCPU(pid)
	}
	start := time.Now()
	stop := start.Add(cfg.sizingStep)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			name := "size:" + strconv.Itoa(n) + ":" + strconv.Itoa(g)
			for ctx.Err() == nil && time.Now().Before(stop) {
				t0 := time.Now()
				if err := sizingCycle(ctx, s.c, name); err != nil {
					failures.Add(1)
					errOnce.Do(func() { p.firstErr = err })
					continue
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	server := 0.0
	for _, pid := range s.pids {
		server += procCPU(pid)
	}
	var all durations
	for _, l := range lat {
		all = append(all, l...)
	}
	all = all.sorted()
	p.cycles, p.failures = int64(len(all)), failures.Load()
	p.perSec = float64(p.cycles) / elapsed.Seconds()
	p.p50, p.p99 = all.quantile(0.5), all.quantile(0.99)
	if len(s.pids) > 0 && p.cycles > 0 {
		p.serverCPU = time.Duration((server - server0) / float64(p.cycles) * 1e9)
	}
	return p
}

// inParallel calls f for the indices below n, from 64 goroutines at most, each taking the
// next index until none is left or its f returns false, and returns when all have stopped.
func inParallel(n int, f func(i int) bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(64, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && f(i); i = int(next.Add(1)) - 1 {
			}
		})
	}
	wg.Wait()
}

// sizingCycle is one TryObtain and Release of name, each bounded.
func sizingCycle(ctx context.Context, c *fencelock.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := c.TryObtain(ctx, name)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}
