package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
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

// --max-hold with run itself stopped (SIGSTOP) past its cap and its TTL: another holder gets
// the lock meanwhile; once run resumes it ends its command as a lost lock (exit 76), and leaves
// the new holder's lock alone.
func TestRunPausedPastItsCap(t *testing.T) {
	r, env := redisEnv(t)
	start := time.Now()
	dir := t.TempDir()
	p := startRun(t, env, "run", "--ttl", "1s", "--max-hold", "1500ms", "--kill-after", "1s", "paused-cap", "--", "sh", "-c",
		fmt.Sprintf(`touch %s/started; exec sleep 30`, dir))
	waitFile(t, dir+"/started") // run holds the lock and has started its command
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
		}
	}()
	other := fencelock.New(redisbackend.New(r.ClientT(t)))
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, err := other.Obtain(ctx, "paused-cap", fencelock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // past the cap, whatever the machine's pace
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if code := p.wait(t); code != exitLost {
		t.Fatalf("run resumed past its cap exited %d, want %d; stderr %q", code, exitLost, p.errb.String())
	}
	info, err := other.Inspect(ctx, "paused-cap")
	if err != nil || !info.Held || info.Token != next.Token() {
		t.Fatalf("the new holder's lock once run resumed and exited: %+v, %v; want token %d held", info, err, next.Token())
	}
}

// --lock-delay with run stopped (SIGSTOP) while it holds the lock: the lock stays taken for the
// delay after its TTL, so the next holder is served no sooner than TTL + delay after run began;
// a negative delay is a usage error.
func TestRunLockDelayPaused(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	start := time.Now()
	p := startRun(t, env, "run", "--ttl", "1s", "--lock-delay", "2s", "--kill-after", "1s", "delayed", "--", "sh", "-c",
		fmt.Sprintf(`touch %s/started; exec sleep 30`, dir))
	waitFile(t, dir+"/started")
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT) }()
	other := fencelock.New(redisbackend.New(r.ClientT(t)))
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, err := other.Obtain(ctx, "delayed", fencelock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if took := time.Since(start); took < 3*time.Second {
		t.Fatalf("the next holder was served %v after run began, within its 1 s TTL and 2 s delay", took)
	}
	if res := cli(t, 30*time.Second, env, "run", "--lock-delay", "-1s", "x", "--", "true"); res.code != exitUsage {
		t.Fatalf("--lock-delay -1s: exit %d, want %d", res.code, exitUsage)
	}
}
