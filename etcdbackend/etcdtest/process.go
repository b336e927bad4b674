package etcdtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// childEnv carries a child's member settings (a childMember as JSON) from the test process that
// starts it to the copy of itself it runs.
const childEnv = "FENCELOCK_ETCDTEST_MEMBER"

type childMember struct {
	Name, Dir, Client, Peer string
	Initial                 string // the cluster's members, as embed.Config.InitialCluster
	NoFsync                 bool
}

// ServeIfAsked runs an etcd member and exits, when this process is the child that a Process
// cluster started: a test binary whose tests start Process clusters calls it first thing in its
// TestMain. It returns at once in every other process.
//
// The member serves until its standard input closes, which happens when the parent closes the
// cluster or exits in any way, so that no child outlives its test.
func ServeIfAsked() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	if err := serve(spec); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Println(portTaken) // the parent tries again on other ports
		} else {
			fmt.Fprintln(os.Stderr, "etcdtest child:", err)
		}
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(spec string) error {
	var m childMember
	if err := json.Unmarshal([]byte(spec), &m); err != nil {
		return err
	}
	cu, err := url.Parse(m.Client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(m.Peer)
	if err != nil {
		return err
	}
	cfg := memberConfig(m.Name, m.Dir, cu, pu, m.Initial, m.NoFsync)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		return errors.New("not ready after 30s")
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// portTaken is what a child says, instead of "ready", when one of its ports was taken before it
// bound it.
const portTaken = "port taken"

// process is a member running in a child process.
type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startProcesses starts a cluster of n members, each in a child process: this test binary run
// again, whose TestMain hands it to ServeIfAsked. The members of a new cluster wait for each
// other, so all start before any is waited for.
func startProcesses(c *Cluster, dir string, n int, opts Options) (err error) {
	defer func() {
		if err != nil { // a try that failed leaves no child behind for the next
			for _, p := range c.procs {
				p.stop()
			}
			c.procs, c.Endpoints = nil, nil
		}
	}()
	var members []childMember
	var initial []string
	for i := range n {
		cu, err := pickURL()
		if err != nil {
			return err
		}
		pu, err := pickURL()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("m%d", i)
		members = append(members, childMember{Name: name, Dir: dir + "/" + name, Client: cu.String(), Peer: pu.String(), NoFsync: opts.NoFsync})
		initial = append(initial, name+"="+pu.String())
	}
	var readies []chan error
	for _, m := range members {
		m.Initial = strings.Join(initial, ",")
		p, ready, err := startChild(m)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
		readies = append(readies, ready)
	}
	timeout := time.After(40 * time.Second)
	for _, ready := range readies {
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
		case <-timeout:
			return errors.New("the etcd children are not ready after 40s")
		}
	}
	for _, p := range c.procs {
		if opts.CPU != "" {
			if out, err := exec.Command("taskset", "-a", "-p", "-c", opts.CPU, strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err != nil {
				return fmt.Errorf("pinning the etcd child to CPU %s: %v: %s", opts.CPU, err, out)
			}
		}
	}
	for _, m := range members {
		c.Endpoints = append(c.Endpoints, m.Client)
	}
	return nil
}

// startChild starts the child that serves m; ready says when it serves, or why it will not.
func startChild(m childMember) (*process, chan error, error) {
	spec, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the etcd child: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		switch {
		case err == io.EOF:
			err = errors.New("the etcd child exited without serving (does the test binary's TestMain call etcdtest.ServeIfAsked?)")
		case err == nil && strings.TrimSpace(line) == portTaken:
			err = fmt.Errorf("the etcd child's port was taken: %w", syscall.EADDRINUSE)
		case err == nil && strings.TrimSpace(line) != "ready":
			err = fmt.Errorf("the etcd child said %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return &process{cmd: cmd, stdin: stdin}, ready, nil
}

// stop ends the child: its standard input closes, and it is killed if it has not exited 10s
// later.
func (p *process) stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// memberConfig is the configuration of member name of a cluster whose members are initial.
func memberConfig(name, dir string, client, peer *url.URL, initial string, noFsync bool) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "fencelock-test"
	cfg.UnsafeNoFsync = noFsync
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Fast elections, so that a test that kills the leader waits a second, not ten.
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	return cfg
}
