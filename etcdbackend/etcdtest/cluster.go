// Package etcdtest runs real etcd members in-process, through etcd's embed package, on free
// loopback ports: for the etcd backend's tests and benchmarks, and for tests elsewhere (the
// safety suite) that need a real cluster whose members can be killed and restarted.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is one or more etcd members started in this process.
type Cluster struct {
	Members   []*Member // none for a Process cluster
	Endpoints []string
	dir       string
	procs     []*process // the children that serve a Process cluster, one a member
}

// Member is one etcd member.
type Member struct {
	Name     string
	Endpoint string // client URL, http://127.0.0.1:port
	Addr     string // the client URL's host:port, for a proxy's target
	cfg      *embed.Config

	mu      sync.Mutex // guards etcd and stopped; held while the member starts again
	etcd    *embed.Etcd
	stopped bool
}

// Options configure a cluster.
type Options struct {
	// Members is the number of members. Default: 1.
	Members int
	// NoFsync turns fsync off (etcd's --unsafe-no-fsync), for benchmarks that want to show what
	// the disk costs.
	NoFsync bool
	// Process runs each member in a child process of its own, as a deployed etcd runs apart
	// from its clients, so that a benchmark's figures (its allocations, its CPU) are the
	// client's alone. The test binary's TestMain must call ServeIfAsked first. The members
	// cannot be killed or restarted: the cluster has no Members.
	Process bool
	// CPU, for a Process cluster, pins every thread of the child to these CPUs (taskset's
	// list, such as "0"), away from a benchmark run under taskset on the others.
	CPU string
}

// Start starts a cluster and stops it when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// New starts a cluster; the caller must Close it.
func New(opts Options) (*Cluster, error) {
	n := max(opts.Members, 1)
	dir, err := os.MkdirTemp("", "fencelock-etcd-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for try := 1; ; try++ {
		sub := fmt.Sprintf("%s/try%d", dir, try) // a failed try may leave data behind
		if opts.Process {
			err = startProcesses(c, sub, n, opts)
		} else {
			c.Members, err = startMembers(sub, n, opts.NoFsync)
		}
		if err == nil {
			break
		}
		if try == startTries || !errors.Is(err, syscall.EADDRINUSE) {
			c.Close()
			return nil, fmt.Errorf("etcdtest: starting etcd: %w", err)
		}
	}
	if opts.Process {
		return c, nil
	}
	for _, m := range c.Members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			c.Close()
			return nil, errors.New("etcd member not ready after 30s")
		}
		c.Endpoints = append(c.Endpoints, m.Endpoint)
	}
	return c, nil
}

// startTries is how many sets of ports New tries: a port found free can be taken before the
// member binds it, by tests of other packages and by the connections their clients dial.
const startTries = 5

// restartPortWait bounds how long Restart waits for a member's port that something else holds,
// trying every restartPoll.
const (
	restartPortWait = 10 * time.Second
	restartPoll     = 100 * time.Millisecond
)

// startMembers starts the n members of a new cluster, with their data under dir, on ports
// found free. An error that wraps syscall.EADDRINUSE means one of the ports was taken first.
func startMembers(dir string, n int, noFsync bool) ([]*Member, error) {
	type ports struct{ client, peer *url.URL }
	var all []ports
	var initial []string
	for i := 0; i < n; i++ {
		cu, err := pickURL()
		if err != nil {
			return nil, err
		}
		pu, err := pickURL()
		if err != nil {
			return nil, err
		}
		all = append(all, ports{cu, pu})
		initial = append(initial, fmt.Sprintf("m%d=%s", i, pu))
	}
	cfgs := make([]*embed.Config, n)
	for i, p := range all {
		cfgs[i] = memberConfig(fmt.Sprintf("m%d", i), fmt.Sprintf("%s/m%d", dir, i), p.client, p.peer, strings.Join(initial, ","), noFsync)
	}
	// Members of a new cluster wait for each other, so they start together.
	type started struct {
		i   int
		e   *embed.Etcd
		err error
	}
	ch := make(chan started, n)
	for i, cfg := range cfgs {
		go func() {
			e, err := embed.StartEtcd(cfg)
			ch <- started{i, e, err}
		}()
	}
	members := make([]*Member, n)
	var errs []error
	for range cfgs {
		s := <-ch
		if s.err != nil {
			errs = append(errs, s.err)
			continue
		}
		members[s.i] = &Member{Name: cfgs[s.i].Name, Endpoint: all[s.i].client.String(), Addr: all[s.i].client.Host, cfg: cfgs[s.i], etcd: s.e}
	}
	if len(errs) > 0 {
		for _, m := range members {
			if m != nil {
				m.stop()
			}
		}
		return nil, errors.Join(errs...)
	}
	return members, nil
}

func freeURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	return url.Parse("http://" + addr)
}

// Client returns a client of the whole cluster, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return c.ClientOf(t, c.Endpoints...)
}

// ClientOf returns a client of the given endpoints, closed when the test ends.
func (c *Cluster) ClientOf(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader returns the member that leads, waiting up to 10s for an election.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		for _, m := range c.Members {
			if m.leads() {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Running reports whether the member has not been stopped.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stopped
}

func (m *Member) leads() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.stopped && m.etcd.Server.Leader() == m.etcd.Server.MemberID()
}

// Restart starts a killed member again on its ports, with the data it had, and waits until it
// has rejoined the cluster and serves, as a restarted process would. Running and Leader wait
// for it meanwhile.
func (m *Member) Restart() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.stopped {
		return fmt.Errorf("etcdtest: %s is running", m.Name)
	}
	// The ports are the member's own, so a port that a dialled connection took meanwhile is
	// waited for, as an operator would wait, for a while.
	var e *embed.Etcd
	var err error
	for waited := time.Duration(0); ; waited += restartPoll {
		e, err = embed.StartEtcd(m.cfg)
		if err == nil {
			break
		}
		if waited >= restartPortWait || !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("etcdtest: restarting %s: %w", m.Name, err)
		}
		time.Sleep(restartPoll)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("etcdtest: %s not ready 30s after its restart", m.Name)
	}
	m.etcd, m.stopped = e, false
	return nil
}

// Kill stops the member abruptly, without a graceful leadership transfer.
func (m *Member) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	m.etcd.Server.HardStop()
	m.etcd.Close()
}

func (m *Member) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	m.etcd.Close()
}

// Close stops every member and removes the data.
func (c *Cluster) Close() {
	for _, p := range c.procs {
		p.stop()
	}
	for _, m := range c.Members {
		if m != nil {
			m.stop()
		}
	}
	_ = os.RemoveAll(c.dir)
}

// pickURL finds the URL a member listens on; a test replaces it.
var pickURL = freeURL

// PIDs returns the process IDs of a Process cluster's children, each serving one member; none
// for a cluster whose members run in this process.
func (c *Cluster) PIDs() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}
