package fencelock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// A worker is this test binary run again as a separate process, so that a test can SIGSTOP a
// client the way a long GC pause or a stopped VM does. It obtains one lock and reports.

const workerEnv = "FENCELOCK_TEST_WORKER"

// workerJob is what a worker is told to do.
type workerJob struct {
	Addr string        `json:"addr"`
	Name string        `json:"name"`
	TTL  time.Duration `json:"ttl"`
}

// workerReport is what a worker says once its Obtain returned.
type workerReport struct {
	Err       string        `json:"err,omitempty"`   // Obtain's error
	Token     int64         `json:"token,omitempty"` // the lock's token
	Valid     string        `json:"valid,omitempty"` // Valid()'s error right after Obtain, "" when valid
	Remaining time.Duration `json:"remaining"`       // ValidUntil − now right after Obtain
}

// runWorkerIfAsked runs the worker and exits when the environment asks for one.
func runWorkerIfAsked() {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		return
	}
	var job workerJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb := redis.NewClient(&redis.Options{Addr: job.Addr, ContextTimeoutEnabled: true})
	c := fencelock.New(redisbackend.New(rdb))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	lock, err := c.Obtain(ctx, job.Name, fencelock.WithTTL(job.TTL))
	var r workerReport
	if err != nil {
		r.Err = err.Error()
	} else {
		r.Token = lock.Token()
		if verr := lock.Valid(); verr != nil {
			r.Valid = verr.Error()
		}
		r.Remaining = time.Until(lock.ValidUntil())
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	// Hold until the test closes stdin, then let the lock go.
	_, _ = io.Copy(io.Discard, os.Stdin)
	if lock != nil {
		_ = lock.Release(ctx)
	}
	cancel()
	_ = c.Close()
	_ = rdb.Close()
	os.Exit(0)
}

// worker is a running worker process.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	report chan workerReport
}

func startWorker(t *testing.T, job workerJob) *worker {
	t.Helper()
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := testserver.StartChild(cmd); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, stdin: stdin, report: make(chan workerReport, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			var r workerReport
			if err := json.Unmarshal(sc.Bytes(), &r); err == nil {
				w.report <- r
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return w
}

// stop sends SIGSTOP and returns once every thread of the worker has stopped: the signal takes
// effect at each thread's next entry into the kernel, and a worker still running for a moment
// after kill returned could, say, take a hand-over the test meant it to miss.
func (w *worker) stop() {
	pid := w.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(pid) {
			return
		}
	}
}

// allStopped reports whether every thread of process pid is stopped (state T in
// /proc/PID/task/TID/stat).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses and may hold spaces.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
func (w *worker) resume() { _ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGCONT) }
