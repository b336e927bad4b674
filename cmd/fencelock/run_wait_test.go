package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A positive --wait bounds the wait for a lock held elsewhere, not the first attempt: a free
// lock is obtained however short the wait.
func TestRunShortWaitFreeLock(t *testing.T) {
	_, env := redisEnv(t)
	for _, wait := range []string{"1ns", "1us"} {
		if res := cli(t, 20*time.Second, env, "run", "--wait", wait, "free-"+wait, "--", "sh", "-c", "exit 0"); res.code != 0 {
			t.Fatalf("--wait %s on a free lock: exit %d, stderr %q", wait, res.code, res.stderr)
		}
	}
}

// A backend that answers PING but refuses writes is a failure of fencelock's (125), not a lock
// held elsewhere (75), with or without a wait.
func TestRunBackendRefusesWrites(t *testing.T) {
	r, env := redisEnv(t)
	rc := r.ClientT(t)
	// A replica of a master that does not exist answers PING and refuses every write.
	if err := rc.Do(t.Context(), "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []string{"0", "2s"} {
		res := cli(t, 30*time.Second, env, "run", "--wait", wait, "refused", "--", "true")
		if res.code != exitFailure || !strings.Contains(strings.ToLower(res.stderr), "read only") {
			t.Errorf("--wait %s against a read-only replica: exit %d (want %d), stderr %q", wait, res.code, exitFailure, res.stderr)
		}
	}
}

// A signal during the wait ends it: run exits 128+signal, as a shell does, and the command
// never starts. The lock stays with its holder.
func TestRunSignalEndsWait(t *testing.T) {
	r, env := redisEnv(t)
	holder := startRun(t, env, "run", "waited", "--", "sleep", "600")
	waitHeld(t, r, "waited")
	rc := r.ClientT(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		marker := tempFile(t, "ran")
		p := startRun(t, env, "run", "--wait", "15s", "--conflict-exit-code", "9", "waited", "--", "touch", marker)
		// run connects after it has set up its signal handling; then it waits. Its connections
		// carry its PID: counting clients took a reconnect of the holder's loss watch for it.
		for !strings.Contains(clientList(t, rc), fmt.Sprintf("name=fencelock-%d ", p.cmd.Process.Pid)) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		sent := time.Now()
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := p.wait(t)
		took := time.Since(sent)
		if code != 128+int(sig) || took > 5*time.Second {
			t.Errorf("%v during the wait: exit %d after %v, want %d at once; stderr %q", sig, code, took.Round(time.Millisecond), 128+int(sig), p.errb.String())
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%v during the wait: the command ran", sig)
		}
	}
	if !held(t, r, "waited") {
		t.Fatal("the holder lost its lock")
	}
	holder.stop(t)
}

// clients counts the connections the Redis server has now.
func clientList(t *testing.T, rc *redis.Client) string {
	t.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return list
}
