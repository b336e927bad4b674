package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// run paused was not its command paused: the command wrote on with an old term beside the new
// leader's. Now it gets the validity deadline to check before each write:
// FENCELOCK_VALID_UNTIL, the first one, and FENCELOCK_VALID_UNTIL_FILE, which run rewrites
// after each renewal and sets to 0 when the lock is lost, and removes when it exits.
func TestRunGivesTheCommandItsDeadline(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	// The command ignores SIGTERM, so that it outlives the loss until the test kills it.
	script := fmt.Sprintf(`echo "$$ $FENCELOCK_VALID_UNTIL $FENCELOCK_VALID_UNTIL_FILE" > %s/env.tmp && mv %s/env.tmp %s/env; trap '' TERM; while :; do sleep 0.05; done`, dir, dir, dir)
	p := startRun(t, env, "run", "--ttl", "1s", "--kill-after", "0", "deadline", "--", "sh", "-c", script)
	waitFile(t, dir+"/env")
	fields := lines(t, dir+"/env")
	if len(fields) != 3 {
		t.Fatalf("the command saw %q: want its PID, FENCELOCK_VALID_UNTIL and FENCELOCK_VALID_UNTIL_FILE", fields)
	}
	pid, _ := strconv.Atoi(fields[0])
	killAtEnd(t, pid)
	first, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil || first <= 0 {
		t.Fatalf("FENCELOCK_VALID_UNTIL=%q: want Unix milliseconds", fields[1])
	}
	file := fields[2]
	read := func() int64 {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("FENCELOCK_VALID_UNTIL_FILE: %v", err)
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("FENCELOCK_VALID_UNTIL_FILE holds %q: want Unix milliseconds", b)
		}
		return ms
	}
	if got := read(); got < first {
		t.Fatalf("FENCELOCK_VALID_UNTIL_FILE says %d, before FENCELOCK_VALID_UNTIL %d", got, first)
	}
	// A renewal moves it on (the watchdog renews a 1 s lock about every third of a second).
	waitFor(t, 20*time.Second, "the deadline in FENCELOCK_VALID_UNTIL_FILE never moved past the first", func() bool { return read() > first })

	// Lost: the file says 0, so that a command that checks it writes no more.
	forceRelease(t, r, "deadline")
	waitFor(t, 20*time.Second, "FENCELOCK_VALID_UNTIL_FILE did not say 0 after the loss", func() bool { return read() == 0 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != exitLost {
		t.Fatalf("run exited %d after the loss, want %d; stderr %q", code, exitLost, p.errb.String())
	}
	if exists(file) {
		t.Fatalf("%s outlived run", file)
	}
}

// The case of the issue: run alone is stopped (SIGSTOP), so it neither renews nor ends the
// command. A command that checks FENCELOCK_VALID_UNTIL_FILE before each write stops writing by
// itself once the deadline there passes, on its own clock; when run continues, it finds the
// lock lost and ends the command.
func TestRunPausedCommandStopsByItsDeadline(t *testing.T) {
	_, env := redisEnv(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`while :; do
  now=$(date +%%s%%3N); until=$(cat "$FENCELOCK_VALID_UNTIL_FILE")
  if [ "$now" -lt "$until" ]; then echo "$now $until" >> %[1]s/writes; else echo "$now $until" > %[1]s/refused.tmp && mv %[1]s/refused.tmp %[1]s/refused; fi
  sleep 0.02
done`, dir)
	p := startRun(t, env, "run", "--ttl", "1s", "--kill-after", "1s", "paused", "--", "sh", "-c", script)
	waitFile(t, dir+"/writes")
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	waitFile(t, dir+"/refused")
	refused := lines(t, dir+"/refused")
	writes := lines(t, dir+"/writes")
	if len(refused) != 2 || len(writes) < 2 {
		t.Fatalf("refused %q, writes %q", refused, writes)
	}
	// Every write was checked against a deadline still ahead on the command's clock, and the
	// refusal came once the deadline that run, stopped, could no longer move had passed.
	last, _ := strconv.ParseInt(writes[len(writes)-2], 10, 64)
	lastUntil, _ := strconv.ParseInt(writes[len(writes)-1], 10, 64)
	at, _ := strconv.ParseInt(refused[0], 10, 64)
	until, _ := strconv.ParseInt(refused[1], 10, 64)
	if last >= lastUntil || at < until || until <= 0 {
		t.Fatalf("last write at %d under deadline %d; refused at %d under deadline %d", last, lastUntil, at, until)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	if code := p.wait(t); code != exitLost {
		t.Fatalf("run exited %d after it continued past its lock's TTL, want %d; stderr %q", code, exitLost, p.errb.String())
	}
}

// run --restart waited for the lock again through an outage without a word. Now it says, once
// the backend has failed its attempts for fencelock.UnavailableEvery, that it still tries, and
// when the backend answers again; then the next term begins.
func TestRunRestartReportsOutage(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`echo "$FENCELOCK_TOKEN" >> %s/terms; exec sleep 30`, dir)
	p := startRun(t, env, "run", "--wait", "-1s", "--restart", "--ttl", "1s", "--kill-after", "1s", "outage", "--", "sh", "-c", script)
	terms := func() []string { return lines(t, dir+"/terms") }
	waitFor(t, 20*time.Second, "the first term never began", func() bool { return len(terms()) == 1 })
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "run never said the backend fails its attempts", func() bool {
		return strings.Contains(p.errb.String(), `lock "outage": every attempt for`) && strings.Contains(p.errb.String(), "still trying")
	})
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "no second term after the backend came back", func() bool { return len(terms()) == 2 })
	if !strings.Contains(p.errb.String(), `lock "outage": the backend answers again`) {
		t.Errorf("run did not say the backend answers again: %q", p.errb.String())
	}
}
