// Package zktest runs a real standalone ZooKeeper server (from the Debian package zookeeper)
// on a free loopback port, and a dialer that cuts a go-zookeeper client off from it: for the
// ZooKeeper backend's tests and benchmarks, and for tests elsewhere (the safety suite) that
// need a real server. NewEnsemble runs a quorum of servers, for benchmarks that size one.
//
// The server runs java in the foreground as a child of the test binary, with its own data
// directory and generated zoo.cfg, and is killed when the test binary dies (Pdeathsig), so a
// crashed test run leaves no server behind.
package zktest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

// TickTime is the server's tick. Session timeouts are negotiated into [2, 20] ticks, so a
// short tick lets tests expire sessions in about a second.
const TickTime = 500 * time.Millisecond

// MinSessionTimeout and MaxSessionTimeout bound the session timeouts the server grants.
const (
	MinSessionTimeout = 2 * TickTime
	MaxSessionTimeout = 20 * TickTime
)

const (
	jarPath      = "/usr/share/java/zookeeper.jar" // its manifest's Class-Path names the dependencies
	slf4jBinding = "/usr/share/java/slf4j-simple.jar"
	readyTimeout = 30 * time.Second // a JVM on a loaded two-core machine under -race is slow to start
	stopGrace    = 5 * time.Second
	startTries   = 5 // a port found free may be taken by another process before java binds it
	// restartPortWait bounds how long Restart, which keeps the port, waits for it to be free,
	// trying every restartPoll.
	restartPortWait = 10 * time.Second
	restartPoll     = 100 * time.Millisecond
)

// Server is one standalone ZooKeeper server process.
type Server struct {
	// Addr is "127.0.0.1:port", the address to give zk.Connect.
	Addr string

	dir     string
	cfgPath string
	outPath string
	java    string
	opts    Options

	mu     sync.Mutex // guards cmd, done, paused and outFrom
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd has exited and been waited for
	paused bool
	// outFrom is the output's size when the server last started: what it wrote since begins
	// there.
	outFrom int64

	// quorum, for a server of an Ensemble: its zoo.cfg's server.N lines and its own N.
	quorum []string
	myid   int
}

// Options configure a server.
type Options struct {
	// Fsync makes the server fsync its transaction log before it answers a write, as a
	// deployed ZooKeeper does (forceSync=yes, its default). It is off unless asked for: the
	// tests are about protocol behaviour, not durability, and fsync on a shared disk makes
	// their timing erratic. Benchmarks ask for it.
	Fsync bool
	// CPU pins every thread of the server to these CPUs (taskset's list, such as "0"), away
	// from a benchmark run under taskset on the others, as a deployed ZooKeeper runs apart
	// from its clients.
	CPU string
}

// Start starts a server and stops it when the test ends. It fails the test, naming the Debian
// package to install, when java or ZooKeeper is missing.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// New is Start without a testing.TB, for TestMain; the caller must Close the server.
func New(opts Options) (*Server, error) {
	java, err := findJava()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(jarPath); err != nil {
		return nil, fmt.Errorf("zktest: %s not found: install the Debian package zookeeper (apt-get install zookeeper)", jarPath)
	}
	dir, err := os.MkdirTemp("", "fencelock-zk-")
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	s := &Server{dir: dir, cfgPath: filepath.Join(dir, "zoo.cfg"), outPath: filepath.Join(dir, "zookeeper.out"), java: java, opts: opts}
	for try := 1; ; try++ {
		err = s.startOnFreePort()
		if err == nil {
			return s, nil
		}
		if try == startTries || !s.portTaken() {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

func findJava() (string, error) {
	if p, err := exec.LookPath("java"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat("/usr/bin/java"); err == nil && !fi.IsDir() {
		return "/usr/bin/java", nil
	}
	return "", errors.New("zktest: java not found: install the Debian package zookeeper (apt-get install zookeeper), which brings a Java runtime")
}

func (s *Server) startOnFreePort() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("zktest: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.configure(port); err != nil {
		return err
	}
	if err := s.start(); err != nil {
		return err
	}
	if err := s.waitReady(); err != nil {
		_ = s.Kill()
		return err
	}
	return nil
}

// configure writes the server's zoo.cfg for a client port (and its myid, in an Ensemble).
func (s *Server) configure(port int) error {
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	forceSync := "no"
	if s.opts.Fsync {
		forceSync = "yes"
	}
	cfg := strings.Join([]string{
		"tickTime=" + strconv.Itoa(int(TickTime/time.Millisecond)),
		"minSessionTimeout=" + strconv.Itoa(int(MinSessionTimeout/time.Millisecond)),
		"maxSessionTimeout=" + strconv.Itoa(int(MaxSessionTimeout/time.Millisecond)),
		"dataDir=" + filepath.Join(s.dir, "data"),
		"clientPort=" + strconv.Itoa(port),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"admin.enableServer=false",
		// Tests read the watch table (wchp) and readiness (srvr).
		"4lw.commands.whitelist=*",
		"forceSync=" + forceSync,
	}, "\n")
	if len(s.quorum) > 0 {
		cfg += "\ninitLimit=20\nsyncLimit=10\n" + strings.Join(s.quorum, "\n")
		if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
			return fmt.Errorf("zktest: %w", err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), []byte(strconv.Itoa(s.myid)+"\n"), 0o644); err != nil {
			return fmt.Errorf("zktest: %w", err)
		}
	}
	if err := os.WriteFile(s.cfgPath, []byte(cfg+"\n"), 0o644); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	_ = os.Truncate(s.outPath, 0)
	return nil
}

func (s *Server) start() error {
	cp := jarPath
	if _, err := os.Stat(slf4jBinding); err == nil {
		cp += ":" + slf4jBinding
	}
	out, err := os.OpenFile(s.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	defer out.Close() // the child has its own descriptor once started
	var from int64
	if fi, err := out.Stat(); err == nil {
		from = fi.Size()
	}
	s.mu.Lock()
	s.outFrom = from
	s.mu.Unlock()
	bin, args := s.java, []string{}
	if s.opts.CPU != "" {
		// taskset starts java on those CPUs, and every thread java makes inherits them.
		bin, args = "taskset", []string{"-c", s.opts.CPU, s.java}
	}
	cmd := exec.Command(bin, append(args,
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
		"-Djava.net.preferIPv4Stack=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dzookeeper.log.dir="+s.dir,
		"-cp", cp,
		s.mainClass(), s.cfgPath)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL,
		// A Ctrl-C on the terminal reaches the test binary, whose cleanup stops the server;
		// the server must not die first, in the middle of a test's cleanup.
		Setpgid: true,
	}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("zktest: start java: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()
	return nil
}

// mainClass is the server's Java entry point: a quorum peer in an Ensemble, else standalone.
func (s *Server) mainClass() string {
	if len(s.quorum) > 0 {
		return "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	}
	return "org.apache.zookeeper.server.ZooKeeperServerMain"
}

// waitReady polls the srvr command until the server says it serves.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	for {
		// A short deadline: a probe accepted by the kernel before the server listens for
		// itself would otherwise sit out the whole of it.
		out, err := s.fourLetter("srvr", 500*time.Millisecond)
		if err == nil && strings.Contains(out, "Mode:") {
			return nil
		}
		select {
		case <-s.exited():
			return fmt.Errorf("zktest: ZooKeeper exited during startup%s", s.outputTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: ZooKeeper at %s not ready after %v (last: %v)%s", s.Addr, readyTimeout, err, s.outputTail())
		}
	}
}

// FourLetter sends a four-letter-word command (srvr, wchp, cons, ...; all are enabled) and
// returns the answer.
func (s *Server) FourLetter(cmd string) (string, error) { return s.fourLetter(cmd, 5*time.Second) }

func (s *Server) fourLetter(cmd string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	return string(b), err
}

// Restart starts the server again after Stop or Kill, on the same port and data directory.
func (s *Server) Restart() error {
	if !isClosed(s.exited()) {
		return errors.New("zktest: Restart of a running server")
	}
	// A connection dialled from the ephemeral range while the server was down may hold the
	// port: Restart waits for it, as an operator would.
	deadline := time.Now().Add(restartPortWait)
	for {
		err := s.start()
		if err == nil {
			if err = s.waitReady(); err == nil {
				return nil
			}
			_ = s.Kill()
		}
		if !s.portTaken() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(restartPoll)
	}
}

// Stop asks the server to exit (SIGTERM), kills it after a grace period, and waits.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done, paused := s.cmd, s.done, s.paused
	s.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	}
	select {
	case <-done:
		return nil
	case <-time.After(stopGrace):
	}
	return s.Kill()
}

// Kill kills the server (SIGKILL works on a paused process too) and waits.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return nil
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

// Pause freezes the server (SIGSTOP): clients see silence, and no session expires meanwhile.
// It returns once every thread of the JVM has stopped.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || isClosed(s.done) {
		return errors.New("zktest: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("zktest: %v: %w", sig, err)
	}
	s.paused = sig == syscall.SIGSTOP
	if s.paused {
		return testserver.WaitStopped(s.cmd.Process.Pid, stopGrace)
	}
	return nil
}

// PID returns the server's process ID, or 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil || isClosed(s.done) {
		return 0
	}
	return s.cmd.Process.Pid
}

// Close stops the server and removes its directory. It is idempotent.
func (s *Server) Close() error {
	err := s.Stop()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

func (s *Server) exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.done
}

// portTaken reports whether the last start failed because its port was taken.
func (s *Server) portTaken() bool {
	s.mu.Lock()
	from := s.outFrom
	s.mu.Unlock()
	b, _ := os.ReadFile(s.outPath)
	return int64(len(b)) >= from && bytes.Contains(b[from:], []byte("Address already in use"))
}

func (s *Server) outputTail() string {
	b, err := os.ReadFile(s.outPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "\n--- last lines of " + s.outPath + " ---\n" + strings.Join(lines, "\n")
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
