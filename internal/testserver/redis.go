package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is one redis-server process (or valkey-server, see FlavorEnv), a data node or a
// sentinel, on 127.0.0.1.
type Redis struct {
	Addr string // "127.0.0.1:port"
	Port int
	Dir  string // working directory: data files and the server log

	proc *process

	mu     sync.Mutex
	closed bool
}

// StartRedis starts a redis-server and stops it when the test ends. extraArgs
// are redis-server command-line directives such as "--appendonly", "yes";
// they come after the defaults, so they override them.
func StartRedis(t testing.TB, extraArgs ...string) *Redis {
	t.Helper()
	r, err := NewRedis(extraArgs...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	cleanupOnEnd(t, r.Close, r.proc)
	return r
}

// NewRedis is StartRedis without a testing.TB; the caller must Close it.
func NewRedis(extraArgs ...string) (*Redis, error) {
	return newRedisServer(redisSpec{kind: "redis", extra: extraArgs})
}

// redisSpec describes how to launch one data node or sentinel.
type redisSpec struct {
	kind     string // "redis", "cluster" or "sentinel": names the temp dir and log
	extra    []string
	busPort  bool                                               // pick a free cluster bus port too
	prepare  func(dir string) (leadingArgs []string, err error) // e.g. write a config file
	sentinel bool
}

func newRedisServer(spec redisSpec) (*Redis, error) {
	f, err := currentFlavor()
	if err != nil {
		return nil, err
	}
	bin, err := f.serverBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-"+spec.kind+"-*")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	var leading []string
	if spec.prepare != nil {
		if leading, err = spec.prepare(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		r, retry, err := tryStartRedis(bin, dir, leading, spec)
		if err == nil {
			return r, nil
		}
		lastErr = err
		if !retry {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// tryStartRedis starts the server on a fresh port; retry reports whether the
// failure was a port collision worth another attempt.
func tryStartRedis(bin, dir string, leading []string, spec redisSpec) (r *Redis, retry bool, err error) {
	port, err := FreePort()
	if err != nil {
		return nil, false, err
	}
	logPath := filepath.Join(dir, spec.kind+".log")
	// Starting each attempt with empty logs keeps portInUse from seeing an
	// earlier attempt's collision.
	os.Remove(logPath)
	outPath := filepath.Join(dir, spec.kind+".out")
	os.Remove(outPath)

	args := append([]string{}, leading...)
	if spec.sentinel {
		// The server binary runs a sentinel with --sentinel after the config file, in Redis
		// and Valkey alike, so neither needs its sentinel package.
		args = append(args, "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", logPath,
		"--protected-mode", "no",
		"--daemonize", "no",
	)
	if !spec.sentinel {
		// Persistence is off unless a test asks for it: it only slows tests
		// down and leaves state between restarts nobody expects.
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if spec.busPort {
		bus, err := FreePort()
		for err == nil && bus == port {
			bus, err = FreePort()
		}
		if err != nil {
			return nil, false, err
		}
		args = append(args, "--cluster-port", strconv.Itoa(bus))
	}
	args = append(args, spec.extra...)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := &process{
		name:    filepath.Base(bin) + " " + addr,
		bin:     bin,
		args:    args,
		workDir: dir,
		outPath: outPath,
		logPath: logPath,
		stopSig: syscall.SIGTERM,
	}
	r = &Redis{Addr: addr, Port: port, Dir: dir, proc: p}
	if err := r.startAndWait(); err != nil {
		return nil, p.portInUse(), err
	}
	return r, false, nil
}

func (r *Redis) startAndWait() error {
	if err := r.proc.start(); err != nil {
		return err
	}
	if err := r.proc.waitReady(context.Background(), func(ctx context.Context) error {
		return pingRESP(ctx, r.Addr)
	}); err != nil {
		_ = r.proc.kill()
		return err
	}
	return nil
}

// pingRESP speaks just enough RESP to check readiness, so a server that is
// loading (-LOADING) or still binding does not count as up, and no client
// library state (pools, retries, logs) gets involved.
func pingRESP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Close stops the server (SIGTERM, SIGKILL after 5s) and removes its
// directory. It is idempotent; the Redis cannot be restarted afterwards.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.proc.stop()
	return errors.Join(err, os.RemoveAll(r.Dir))
}

// Stop shuts the server down gracefully (SIGTERM, SIGKILL after 5s) but keeps
// its directory, so Restart finds its data (with persistence enabled).
func (r *Redis) Stop() error {
	return r.proc.stop()
}

// Kill crashes the server with SIGKILL and waits for it to die.
func (r *Redis) Kill() error {
	return r.proc.kill()
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// answers, like a long GC pause or a stalled VM. It returns once every thread of
// the server has stopped (WaitStopped).
func (r *Redis) Pause() error {
	return r.proc.signal(syscall.SIGSTOP)
}

// Resume undoes Pause.
func (r *Redis) Resume() error {
	return r.proc.signal(syscall.SIGCONT)
}

// Running reports whether the server process is alive (paused counts).
func (r *Redis) Running() bool {
	return r.proc.running()
}

// PID is the process id of the current server process, 0 if never started.
func (r *Redis) PID() int {
	return r.proc.pid()
}

// Restart starts the server again after Kill or Stop, on the same port and
// directory with the same arguments, and waits until it answers PING.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errClosed
	}
	if r.proc.running() {
		return fmt.Errorf("testserver: restart %s: still running; Kill or Stop it first", r.Addr)
	}
	return restartOnOwnPort(r.startAndWait, r.proc.portInUse)
}

// Client returns a new go-redis client for this server; the caller closes it.
// It honours context deadlines (ContextTimeoutEnabled), which go-redis
// otherwise ignores in favour of its 3s socket timeouts: fault-injection tests
// need a short timeout to mean what it says.
func (r *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
}

// ClientT is Client closed automatically when the test ends.
func (r *Redis) ClientT(t testing.TB) *redis.Client {
	c := r.Client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// LogTail returns the last lines of the server's output and log, for
// debugging a failing test.
func (r *Redis) LogTail() string {
	return r.proc.logTail()
}

// cleanupOnEnd registers closeFn and, if the test failed, logs the servers'
// output first: it is the only trace left once the temp dir is gone.
func cleanupOnEnd(t testing.TB, closeFn func() error, procs ...*process) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				if tail := p.logTail(); tail != "" {
					t.Logf("testserver: %s:%s", p.name, tail)
				}
			}
		}
		if err := closeFn(); err != nil {
			t.Errorf("testserver: close: %v", err)
		}
	})
}

// infoField extracts one "field:value" line from INFO output.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// withTimeout runs f with a short per-call timeout, for polling loops.
func withTimeout(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}
