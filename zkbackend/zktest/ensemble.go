package zktest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// Ensemble is a replicated ZooKeeper deployment: n servers in one quorum on loopback ports,
// each a process of its own, for benchmarks that size one. Its servers are Servers, but made
// to serve together: restarting one alone is not what it is for.
type Ensemble struct {
	Servers []*Server
	Addrs   []string // every server's "127.0.0.1:port", to give zk.Connect
}

// NewEnsemble starts n servers (an odd number, 3 or more) and waits until each serves, which
// it does once they have elected a leader. The caller must Close it.
func NewEnsemble(n int, opts Options) (*Ensemble, error) {
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("zktest: an ensemble of %d servers: want an odd number, 3 or more", n)
	}
	java, err := findJava()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(jarPath); err != nil {
		return nil, fmt.Errorf("zktest: %s not found: install the Debian package zookeeper (apt-get install zookeeper)", jarPath)
	}
	for try := 1; ; try++ {
		e, taken, err := startEnsemble(java, n, opts)
		if err == nil {
			return e, nil
		}
		if try == startTries || !taken {
			return nil, err
		}
	}
}

// startEnsemble makes one try: taken says that it failed because a port was taken meanwhile.
func startEnsemble(java string, n int, opts Options) (e *Ensemble, taken bool, err error) {
	ports, err := freePorts(3 * n) // client, quorum and election ports of each server
	if err != nil {
		return nil, false, err
	}
	e = &Ensemble{}
	defer func() {
		if err != nil {
			for _, s := range e.Servers {
				taken = taken || s.portTaken()
			}
			_ = e.Close()
		}
	}()
	var quorum []string
	for i := range n {
		quorum = append(quorum, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
	}
	for i := range n {
		dir, err := os.MkdirTemp("", "fencelock-zk-")
		if err != nil {
			return e, false, fmt.Errorf("zktest: %w", err)
		}
		s := &Server{dir: dir, cfgPath: filepath.Join(dir, "zoo.cfg"), outPath: filepath.Join(dir, "zookeeper.out"), java: java, opts: opts, quorum: quorum, myid: i + 1}
		e.Servers = append(e.Servers, s)
		if err := s.configure(ports[3*i]); err != nil {
			return e, false, err
		}
		e.Addrs = append(e.Addrs, s.Addr)
	}
	// All start before any is waited for: none serves until a quorum of them runs.
	for _, s := range e.Servers {
		if err := s.start(); err != nil {
			return e, false, err
		}
	}
	for _, s := range e.Servers {
		if err := s.waitReady(); err != nil {
			return e, false, err
		}
	}
	return e, false, nil
}

// freePorts finds n distinct free loopback ports, holding each until all are found.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("zktest: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// PIDs returns the servers' process IDs, 0 for one not running.
func (e *Ensemble) PIDs() []int {
	var out []int
	for _, s := range e.Servers {
		out = append(out, s.PID())
	}
	return out
}

// Close stops every server and removes their directories.
func (e *Ensemble) Close() error {
	var errs []error
	for _, s := range e.Servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
