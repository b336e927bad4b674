package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds how long a freshly started server may take to answer.
	readyTimeout = 10 * time.Second
	// readyPoll is short because servers usually come up in a few milliseconds
	// and every test pays this latency on each start.
	readyPoll = 5 * time.Millisecond
	// stopGrace is how long a server gets to exit after its stop signal before
	// it is killed.
	stopGrace = 5 * time.Second
	// stopWait bounds how long a Pause waits for every thread of the server to stop.
	stopWait = 5 * time.Second
	// startAttempts covers the race between FreePort releasing a port and the
	// server binding it: another process (tests of other packages run in
	// parallel) may take the port in between.
	startAttempts = 5
	// restartPortWait bounds how long a restart, which must keep its port, waits for the port
	// to be free, trying every restartPoll.
	restartPortWait = 10 * time.Second
	restartPoll     = 100 * time.Millisecond
)

// errClosed is returned when a handle is used after Close.
var errClosed = errors.New("testserver: already closed")

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process can take it before the caller binds it; the Start*
// functions retry with a new port when that happens.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lookBinary finds an executable in PATH or the usual Debian locations, which
// may be missing from PATH in minimal environments (e.g. /usr/sbin).
func lookBinary(name, debianPkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/sbin", "/bin"} {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found in PATH or /usr/bin: install the Debian package %s (apt-get install %s)",
		ErrNotInstalled, name, debianPkg, debianPkg)
}

// spawnReqs feeds the spawner goroutine. Pdeathsig fires when the *thread*
// that forked the child exits, not the process (go.dev/issue/27505). Forking
// from one goroutine locked to its thread forever guarantees that thread lives
// as long as the test binary, so children die exactly when the binary does.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			// Never unlocked and never returns: the thread must not exit.
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- r
	return <-r.done
}

// StartChild starts cmd, a helper process of a test, so that it is killed when the test binary
// dies, however it dies: a test that stops its helpers (SIGSTOP) and is then killed leaves
// none behind.
func StartChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return spawn(cmd)
}

// runSpawned runs a short-lived command through the spawner and returns its
// combined output, so it too dies with the test binary.
func runSpawned(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := StartChild(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}

// process is one restartable server process.
type process struct {
	name    string // for error messages, e.g. "redis-server 127.0.0.1:6379"
	bin     string
	args    []string
	workDir string
	// outPath collects stdout and stderr: servers print fatal startup errors
	// there before their own log file is open.
	outPath string
	// logPath is the server's own log file, if it has one.
	logPath string
	stopSig syscall.Signal
	cred    *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has been waited for
	paused bool
	// outFrom and logFrom are the sizes of the output and the log when the process last
	// started: what it wrote since begins there.
	outFrom, logFrom int64
}

// start launches the process. It must not be running.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("testserver: %s is already running", p.name)
	}
	out, err := os.OpenFile(p.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	// The child has its own copy of the descriptor after Start.
	defer out.Close()
	p.outFrom, p.logFrom = fileSize(p.outPath), fileSize(p.logPath)

	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.workDir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig:  syscall.SIGKILL,
		Credential: p.cred,
		// Its own process group keeps a Ctrl-C on the terminal from reaching
		// the server before the test's cleanup does.
		Setpgid: true,
	}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("testserver: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done, p.paused = cmd, done, false
	return nil
}

// exited returns a channel closed when the current process has exited.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

func (p *process) running() bool {
	return !isClosed(p.exited())
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return fmt.Errorf("testserver: %s is not running", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("testserver: signal %v to %s: %w", sig, p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
		if err := WaitStopped(p.cmd.Process.Pid, stopWait); err != nil {
			return err
		}
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// stop asks the process to exit with its stop signal, kills it if it has not
// exited after stopGrace, and waits. Stopping a stopped process is a no-op.
func (p *process) stop() error {
	p.mu.Lock()
	cmd, done, paused := p.cmd, p.done, p.paused
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return nil
	}
	_ = cmd.Process.Signal(p.stopSig)
	if paused {
		// A stopped process only acts on the pending signal once continued.
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
		return nil
	case <-time.After(stopGrace):
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

// kill sends SIGKILL (it works on paused processes too) and waits.
func (p *process) kill() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return fmt.Errorf("testserver: %s is not running", p.name)
	}
	_ = cmd.Process.Kill()
	<-done
	return nil
}

// waitReady polls check until it succeeds, the process exits, or the
// deadline passes. Errors carry the tail of the server's output so a failed
// start explains itself in the test log.
func (p *process) waitReady(ctx context.Context, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	exited := p.exited()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	var lastErr error
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		lastErr = check(cctx)
		ccancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("testserver: %s exited during startup (%v)%s", p.name, lastErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("testserver: %s not ready after %v: %v%s", p.name, readyTimeout, lastErr, p.logTail())
		case <-tick.C:
		}
	}
}

// portInUse reports whether the last start failed because its port was taken.
func (p *process) portInUse() bool {
	p.mu.Lock()
	from := map[string]int64{p.outPath: p.outFrom, p.logPath: p.logFrom}
	p.mu.Unlock()
	for path, off := range from {
		if path == "" {
			continue
		}
		if b, err := os.ReadFile(path); err == nil && int64(len(b)) >= off && bytes.Contains(b[off:], []byte("already in use")) {
			return true
		}
	}
	return false
}

// fileSize is the size of the file at path, 0 if there is none.
func fileSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// restartOnOwnPort runs start until it succeeds or fails for another reason than a taken port,
// for up to restartPortWait: a server restarted on its own port waits, as an operator would, for
// a connection dialled from the ephemeral range while it was down to let the port go.
func restartOnOwnPort(start func() error, portTaken func() bool) error {
	deadline := time.Now().Add(restartPortWait)
	for {
		err := start()
		if err == nil || !portTaken() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(restartPoll)
	}
}

// logTail formats the last lines of the output and log files for errors.
func (p *process) logTail() string {
	var sb strings.Builder
	for _, path := range []string{p.outPath, p.logPath} {
		if path == "" {
			continue
		}
		if t := tailFile(path, 30); t != "" {
			fmt.Fprintf(&sb, "\n--- last lines of %s ---\n%s", path, t)
		}
	}
	return sb.String()
}

func tailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\n")
	parts := bytes.Split(b, []byte("\n"))
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return string(bytes.Join(parts, []byte("\n")))
}

func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
