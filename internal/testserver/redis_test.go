package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestFreePort(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d from FreePort is not bindable: %v", port, err)
	}
	l.Close()
}

func TestLookBinaryNamesDebianPackage(t *testing.T) {
	t.Parallel()
	_, err := lookBinary("fencelock-no-such-binary", "fencelock-pkg")
	if err == nil || !strings.Contains(err.Error(), "install the Debian package fencelock-pkg") {
		t.Fatalf("want an error naming the package, got %v", err)
	}
}

func TestRedisSetGet(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if !strings.HasPrefix(r.Addr, "127.0.0.1:") || r.Addr != fmt.Sprintf("127.0.0.1:%d", r.Port) {
		t.Fatalf("Addr %q does not match Port %d on 127.0.0.1", r.Addr, r.Port)
	}
	ctx := context.Background()
	c := r.ClientT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	// The defaults are in effect: no persistence, loopback only.
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1", "protected-mode": "no", "dir": r.Dir} {
		if cfg[k] != want {
			t.Errorf("CONFIG %s = %q, want %q", k, cfg[k], want)
		}
	}
}

func TestRedisKillRestart(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	ctx := context.Background()
	c := r.ClientT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	pid := r.PID()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if r.Running() {
		t.Fatal("Running after Kill")
	}
	assertProcessGone(t, pid)
	if err := pingRESP(ctx, r.Addr); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := r.Kill(); err == nil {
		t.Fatal("Kill of a dead server should fail")
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		// The pooled connection died with the old process; one retry is the
		// client's business, not the server's.
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after Restart: %v", err)
		}
	}
	if err := r.Restart(); err == nil {
		t.Fatal("Restart of a running server should fail")
	}
}

// TestRedisRestartWaitsForItsPort shows a restart waits for its port when something else took
// it while the server was down, as a connection dialled from the ephemeral range can.
func TestRedisRestartWaitsForItsPort(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		taken.Close()
	}()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := pingRESP(context.Background(), r.Addr); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// TestRedisExtraArgsPersistAcrossKill shows extraArgs override the defaults
// and Restart reuses the directory, so AOF data survives a crash.
func TestRedisExtraArgsPersistAcrossKill(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	c := r.ClientT(t)
	if err := c.Set(ctx, "durable", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	c2 := r.ClientT(t)
	if got, err := c2.Get(ctx, "durable").Result(); err != nil || got != "yes" {
		t.Fatalf("GET after crash = %q, %v; want yes", got, err)
	}
	// Stop is graceful and keeps the data too.
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	c3 := r.ClientT(t)
	if got, err := c3.Get(ctx, "durable").Result(); err != nil || got != "yes" {
		t.Fatalf("GET after Stop/Restart = %q, %v; want yes", got, err)
	}
}

func TestRedisPauseResume(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	c := r.ClientT(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := c.Ping(ctx).Err()
	cancel()
	if !isTimeout(err) {
		t.Fatalf("PING to a paused server: got %v, want a timeout", err)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestRedisCloseWhilePaused(t *testing.T) {
	t.Parallel()
	r, err := NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	pid := r.PID()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	// A stopped process ignores SIGTERM until continued; Close must cope.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	assertProcessGone(t, pid)
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still there after Close: %v", r.Dir, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := r.Restart(); !errors.Is(err, errClosed) {
		t.Fatalf("Restart after Close: got %v, want errClosed", err)
	}
}

func TestNewRedisBadArgsReportsLog(t *testing.T) {
	t.Parallel()
	r, err := NewRedis("--no-such-directive", "x")
	if err == nil {
		r.Close()
		t.Fatal("NewRedis with a bad directive succeeded")
	}
	// The server's own complaint must reach the test log.
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("error lacks the server output: %v", err)
	}
}

// TestChildDiesWithTestBinary runs this test binary as a child that starts a
// redis-server and is then SIGKILLed, and checks the server died with it.
func TestChildDiesWithTestBinary(t *testing.T) {
	t.Parallel()
	pid := orphanHelper(t, "redis")
	assertProcessGone(t, pid)
}

// TestStoppedChildDiesWithTestBinary does the same with a helper process that
// StartChild started and SIGSTOP stopped, as the safety suite stops its workers.
func TestStoppedChildDiesWithTestBinary(t *testing.T) {
	t.Parallel()
	pid := orphanHelper(t, "stopped")
	assertProcessGone(t, pid)
}

// orphanHelper runs this test binary as a helper that starts a child process of
// the given kind and reports its PID, checks the child runs, SIGKILLs the
// helper, and returns the child's PID. In the helper, it starts the child and
// waits to be killed.
func orphanHelper(t *testing.T, kind string) int {
	if mode := os.Getenv("TESTSERVER_ORPHAN_HELPER"); mode != "" {
		if mode != kind {
			t.Skip("another helper's test")
		}
		pid, err := startOrphan(kind)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("PID", pid)
		time.Sleep(time.Minute) // killed by the parent long before
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	// The killed helper cannot remove its temp dir; put it where ours goes.
	cmd.Env = append(os.Environ(), "TESTSERVER_ORPHAN_HELPER="+kind, "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := 0
	sc := bufio.NewScanner(out)
	for pid == 0 && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PID "); ok {
			pid, _ = strconv.Atoi(v)
		} else {
			t.Logf("helper: %s", sc.Text())
		}
	}
	if pid == 0 {
		t.Fatalf("helper did not report a PID (%v)", sc.Err())
	}
	if !processAlive(pid) {
		t.Fatalf("%s child %d not running while its parent lives", kind, pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return pid
}

// startOrphan starts, in the helper, a redis-server or a stopped sleep.
func startOrphan(kind string) (int, error) {
	if kind == "redis" {
		r, err := NewRedis()
		if err != nil {
			return 0, err
		}
		return r.PID(), nil
	}
	cmd := exec.Command("sleep", "60")
	if err := StartChild(cmd); err != nil {
		return 0, err
	}
	return cmd.Process.Pid, syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP)
}

// assertProcessGone waits (bounded) for pid to be dead or a zombie.
func assertProcessGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processAlive treats zombies as dead: an orphan's zombie lingers until init
// reaps it, but it runs nothing and holds no port.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// directClient talks to one address without retries, so a fault shows up as
// an error instead of being retried away.
func directClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause returns only once every thread of the server has stopped: kill(SIGSTOP) returns before
// the signal reaches each thread, and a test that sends a request right after Pause must find
// the server silent. redis-server runs several threads (its background I/O and the io-threads
// asked for here), each stopped on its own.
func TestPauseReturnsOnceEveryThreadStopped(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, "--io-threads", "4")
	for i := range 50 {
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		running, err := runningThreads(r.PID())
		if err != nil {
			t.Fatal(err)
		}
		if running != 0 {
			t.Fatalf("pause %d: %d threads of the server still running after Pause returned", i, running)
		}
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}
