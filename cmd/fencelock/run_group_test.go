package main

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A command that leaves a worker behind keeps the lock until the worker is gone: the next run
// starts only after the worker's last write.
func TestRunHoldsUntilWorkersExit(t *testing.T) {
	_, env := redisEnv(t)
	stamps := tempFile(t, "stamps")
	// The worker writes a stamp every 20 ms for about a second; its shell exits at once.
	worker := fmt.Sprintf(`(for i in $(seq 40); do date +%%s%%N >> %s; sleep 0.02; done) >/dev/null 2>&1 &`, stamps)
	first := startRun(t, env, "run", "bg-worker", "--", "sh", "-c", worker)
	waitFile(t, stamps)
	next := tempFile(t, "next")
	res := cli(t, 60*time.Second, env, "run", "--wait", "30s", "bg-worker", "--", "sh", "-c", "date +%s%N > "+next)
	if res.code != 0 {
		t.Fatalf("second run exited %d: %s", res.code, res.stderr)
	}
	if code := first.wait(t); code != 0 {
		t.Fatalf("first run exited %d: %s", code, first.errb.String())
	}
	at, _ := strconv.ParseInt(lines(t, next)[0], 10, 64)
	ws := lines(t, stamps)
	late := 0
	for _, s := range ws {
		if n, _ := strconv.ParseInt(s, 10, 64); n > at {
			late++
		}
	}
	if late > 0 || len(ws) != 40 {
		t.Fatalf("%d of the first command's worker's %d writes came after the second run's command started", late, len(ws))
	}
}

// On a lost lock, a worker of the command that ignores SIGTERM gets SIGKILL after --kill-after,
// and run exits only once it is gone.
func TestRunLostLockKillsWorkers(t *testing.T) {
	r, env := redisEnv(t)
	pidFile := tempFile(t, "worker.pid")
	// The shell dies on SIGTERM; its background worker ignores it.
	script := fmt.Sprintf(`sh -c 'trap "" TERM; echo $$ > %s; while :; do sleep 0.05; done' >/dev/null 2>&1 & wait`, pidFile)
	p := startRun(t, env, "run", "--ttl", "1s", "--kill-after", "300ms", "lost-worker", "--", "sh", "-c", script)
	waitHeld(t, r, "lost-worker")
	worker := readPID(t, pidFile)
	killAtEnd(t, worker)
	forceRelease(t, r, "lost-worker")
	if code := p.wait(t); code != exitLost {
		t.Fatalf("run exited %d, want %d; stderr %q", code, exitLost, p.errb.String())
	}
	if alive(worker) {
		t.Fatalf("the worker (pid %d) that ignores SIGTERM outlived run's exit 76", worker)
	}
}

// A run killed with SIGKILL takes its command along: the command does not go on without a lock.
func TestRunKilledTakesCommandAlong(t *testing.T) {
	r, env := redisEnv(t)
	pidFile := tempFile(t, "cmd.pid")
	p := startRun(t, env, "run", "--ttl", "2s", "killed", "--", "sh", "-c", fmt.Sprintf(`exec >/dev/null 2>&1; echo $$ > %s; while :; do sleep 0.05; done`, pidFile))
	waitHeld(t, r, "killed")
	command := readPID(t, pidFile)
	killAtEnd(t, command)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	deadline := time.Now().Add(5 * time.Second)
	for alive(command) {
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %d) still runs 5s after run was SIGKILLed", command)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
