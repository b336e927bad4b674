package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A lost lock while the command is stopped (SIGSTOP): the command gets SIGTERM and then
// SIGCONT, so its TERM handler runs, also with --kill-after 0.
func TestRunLostLockWhileStopped(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`exec >/dev/null 2>&1; echo $$ > %[1]s/pid; trap 'echo handled > %[1]s/term; exit 3' TERM; while :; do sleep 0.05; done`, dir)
	p := startRun(t, env, "run", "--ttl", "1s", "--kill-after", "0", "stopped", "--", "sh", "-c", script)
	waitHeld(t, r, "stopped")
	command := readPID(t, dir+"/pid")
	killAtEnd(t, command)
	if err := syscall.Kill(-command, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	forceRelease(t, r, "stopped")
	if code := p.wait(t); code != exitLost {
		t.Fatalf("run exited %d, want %d; stderr %q", code, exitLost, p.errb.String())
	}
	if got := lines(t, dir+"/term"); len(got) != 1 || got[0] != "handled" {
		t.Fatalf("the command's TERM handler did not run: %q", got)
	}
}

// The final release's failure is reported: a lock that was gone at release (an operator
// removed it) exits 76, since the command may have overlapped another holder.
func TestRunReleaseNotHeld(t *testing.T) {
	r, env := redisEnv(t)
	res := cli(t, 30*time.Second, env, "run", "gone-at-release", "--", "sh", "-c",
		fmt.Sprintf(`%s release --force gone-at-release >/dev/null`, binary))
	if res.code != exitLost || !strings.Contains(res.stderr, "not held") {
		t.Fatalf("exit %d (want %d), stderr %q", res.code, exitLost, res.stderr)
	}
	if held(t, r, "gone-at-release") {
		t.Fatal("lock held after run")
	}
}

// A backend that cannot be reached at the final release is reported, and run exits 125 when the
// command itself succeeded; the lock then expires after its TTL.
func TestRunReleaseUnreachable(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	p := startRun(t, env, "run", "unreachable-release", "--", "sh", "-c",
		fmt.Sprintf(`touch %[1]s/ready; while [ ! -e %[1]s/go ]; do sleep 0.02; done`, dir))
	waitHeld(t, r, "unreachable-release")
	waitFile(t, dir+"/ready")
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	touch(t, dir+"/go")
	if code := p.wait(t); code != exitFailure || !strings.Contains(p.errb.String(), "release") {
		t.Fatalf("exit %d (want %d), stderr %q", code, exitFailure, p.errb.String())
	}
}
