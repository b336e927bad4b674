package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

func redisEnv(t *testing.T) (*testserver.Redis, []string) {
	r := testserver.StartRedis(t)
	return r, []string{"FENCELOCK_BACKEND=redis://" + r.Addr}
}

// Two run processes on one name never hold it at once: each child stamps its start and stop
// into a file, and no two intervals overlap.
func TestRunExcludes(t *testing.T) {
	_, env := redisEnv(t)
	stamps := filepath.Join(t.TempDir(), "stamps")
	script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s; sleep 0.2; echo "stop $(date +%%s%%N)" >> %[1]s`, stamps)
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = cli(t, 60*time.Second, env, "run", "--wait", "30s", "excl", "--", "sh", "-c", script).code
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Fatalf("run %d exited %d", i, c)
		}
	}
	f, err := os.Open(stamps)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type interval struct{ start, stop int64 }
	var ivs []interval
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, v, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		if kind == "start" {
			ivs = append(ivs, interval{start: n})
		} else {
			ivs[len(ivs)-1].stop = n
		}
	}
	if len(ivs) != len(codes) {
		t.Fatalf("%d intervals, want %d", len(ivs), len(codes))
	}
	slices.SortFunc(ivs, func(a, b interval) int { return int(a.start - b.start) })
	for i := 1; i < len(ivs); i++ {
		if ivs[i].start < ivs[i-1].stop || ivs[i-1].stop == 0 {
			t.Fatalf("intervals overlap: %v", ivs)
		}
	}
}

// Without --wait the second run gives up at once with the conflict code, or the one asked for.
func TestRunConflict(t *testing.T) {
	r, env := redisEnv(t)
	holder := startRun(t, env, "run", "busy", "--", "sleep", "600")
	waitHeld(t, r, "busy")
	if res := cli(t, 20*time.Second, env, "run", "busy", "--", "true"); res.code != exitConflict || !strings.Contains(res.stderr, "held elsewhere") {
		t.Fatalf("conflict: code %d, stderr %q", res.code, res.stderr)
	}
	if res := cli(t, 20*time.Second, env, "run", "--conflict-exit-code", "9", "busy", "--", "true"); res.code != 9 {
		t.Fatalf("conflict with a chosen code: %d", res.code)
	}
	// The two kinds of conflict read apart: one says --wait would wait, the other how long it
	// waited; both say what the holder's TTL has left.
	if res := cli(t, 20*time.Second, env, "run", "busy", "--", "true"); !strings.Contains(res.stderr, "--wait DURATION waits for it") || !strings.Contains(res.stderr, "the holder's TTL has") {
		t.Errorf("immediate conflict: stderr %q", res.stderr)
	}
	if res := cli(t, 20*time.Second, env, "run", "--wait", "300ms", "busy", "--", "true"); res.code != exitConflict || !strings.Contains(res.stderr, "waited 300ms for it") || !strings.Contains(res.stderr, "the holder's TTL has") {
		t.Errorf("conflict after --wait: code %d, stderr %q", res.code, res.stderr)
	}
	holder.stop(t)
}

// run -n N lets N commands run at once under one name, each with a token of its own, and no
// more; a run that says another N while they run is told so.
func TestRunPermits(t *testing.T) {
	r, env := redisEnv(t)
	permits := func() int { return permitsHeld(t, r, "pool") }
	first := startRun(t, env, "run", "-n", "2", "pool", "--", "sleep", "600")
	second := startRun(t, env, "run", "-n", "2", "pool", "--", "sleep", "600")
	waitFor(t, 20*time.Second, "two permits never held", func() bool { return permits() == 2 })
	if held(t, r, "pool") {
		t.Fatal("run -n took the lock of the same name")
	}
	if res := cli(t, 20*time.Second, env, "status", "--semaphore", "pool"); res.code != 0 ||
		!strings.Contains(res.stdout, `semaphore "pool": 2 of 2 permits held, 0 waiting`) || strings.Count(res.stdout, "sleep, pid") != 2 {
		t.Errorf("status --semaphore: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	var sv struct {
		Limit   int `json:"limit"`
		Permits []struct {
			Token int64 `json:"token"`
		} `json:"permits"`
	}
	if res := cli(t, 20*time.Second, env, "--json", "status", "--semaphore", "pool"); res.code != 0 || json.Unmarshal([]byte(res.stdout), &sv) != nil ||
		sv.Limit != 2 || len(sv.Permits) != 2 || sv.Permits[0].Token == sv.Permits[1].Token {
		t.Errorf("status --semaphore --json: code %d, stdout %q", res.code, res.stdout)
	}
	res := cli(t, 20*time.Second, env, "run", "-n", "2", "pool", "--", "true")
	if res.code != exitConflict || !strings.Contains(res.stderr, `all 2 permits of "pool" are held elsewhere`) || !strings.Contains(res.stderr, "the first to expire has") {
		t.Errorf("a third run of 2 permits: code %d, stderr %q", res.code, res.stderr)
	}
	res = cli(t, 20*time.Second, env, "run", "-n", "2", "--wait", "300ms", "pool", "--", "true")
	if res.code != exitConflict || !strings.Contains(res.stderr, "waited 300ms for one") {
		t.Errorf("a third run of 2 permits with --wait: code %d, stderr %q", res.code, res.stderr)
	}
	res = cli(t, 20*time.Second, env, "run", "-n", "3", "pool", "--", "true")
	if res.code != exitUsage || !strings.Contains(res.stderr, "has limit 2 while its permits are held; this call asked for 3") {
		t.Errorf("a run of 3 permits beside runs of 2: code %d, stderr %q", res.code, res.stderr)
	}
	if res := cli(t, 20*time.Second, env, "run", "-n", "0", "pool", "--", "true"); res.code != exitUsage {
		t.Errorf("-n 0: code %d, stderr %q", res.code, res.stderr)
	}
	// A third waits its turn, and gets a token above both.
	third := startRun(t, env, "run", "-n", "2", "--wait", "-1s", "pool", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"`)
	first.stop(t)
	if code := third.wait(t); code != 0 {
		t.Fatalf("the waiting run exited %d: %q", code, third.errb.String())
	}
	if tok, err := strconv.ParseInt(strings.TrimSpace(third.out.String()), 10, 64); err != nil || tok <= 0 {
		t.Fatalf("the waiting run's command saw FENCELOCK_TOKEN %q", third.out.String())
	}
	second.stop(t)
	waitFor(t, 20*time.Second, "permits left behind", func() bool { return permits() == 0 })
}

// run --restart is a daemon under a leader election: a lost lock ends the command, and run
// waits for the lock again and runs the command again, with the next term's token.
func TestRunRestartAfterLoss(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`echo "$FENCELOCK_TOKEN" >> %s/terms; exec sleep 30`, dir)
	p := startRun(t, env, "run", "--wait", "-1s", "--restart", "--ttl", "2s", "--kill-after", "1s", "leader", "--", "sh", "-c", script)
	terms := func() []string { return lines(t, dir+"/terms") }
	waitFor(t, 20*time.Second, "the first term never began", func() bool { return len(terms()) == 1 })
	forceRelease(t, r, "leader")
	waitFor(t, 20*time.Second, "no second term after the lock was lost", func() bool { return len(terms()) == 2 })
	got := terms()
	first, _ := strconv.ParseInt(got[0], 10, 64)
	second, _ := strconv.ParseInt(got[1], 10, 64)
	if first <= 0 || second <= first {
		t.Fatalf("terms %q: want two tokens, increasing", got)
	}
	if res := cli(t, 20*time.Second, env, "status", "leader"); res.code != 0 || !strings.Contains(res.stdout, got[1]) {
		t.Errorf("status of the leader: code %d, stdout %q", res.code, res.stdout)
	}
	p.stop(t) // SIGTERM: passed to the command, which dies of it; run exits, and does not restart
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("run --restart after SIGTERM exited %d; stderr %q", code, p.errb.String())
	}
	if !strings.Contains(p.errb.String(), "waiting for the lock again (--restart)") {
		t.Errorf("run --restart did not say it waits again: %q", p.errb.String())
	}
	if len(terms()) != 2 {
		t.Errorf("terms after the stop: %q", terms())
	}
}

// run, doctor and bench word a TTL below the minimum alike.
func TestTTLMinimumWording(t *testing.T) {
	_, env := redisEnv(t)
	const want = "fencelock: --ttl 1ms is shorter than the minimum 10ms a lock accepts\n"
	for _, args := range [][]string{{"run", "--ttl", "1ms", "x", "--", "true"}, {"doctor", "--ttl", "1ms"}, {"bench", "--ttl", "1ms"}} {
		if res := cli(t, 20*time.Second, env, args...); res.code != exitUsage || res.stderr != want {
			t.Errorf("%q: code %d, stderr %q, want %q", args, res.code, res.stderr, want)
		}
	}
}

func TestRunPassesExitCodeAndEnvironment(t *testing.T) {
	_, env := redisEnv(t)
	if res := cli(t, 20*time.Second, env, "run", "codes", "--", "sh", "-c", "exit 7"); res.code != 7 {
		t.Fatalf("exit code %d, want 7", res.code)
	}
	res := cli(t, 20*time.Second, env, "run", "envs", "--", "sh", "-c", `echo "$FENCELOCK_NAME $FENCELOCK_TOKEN"`)
	name, token, _ := strings.Cut(strings.TrimSpace(res.stdout), " ")
	if res.code != 0 || name != "envs" {
		t.Fatalf("child saw %q (code %d)", res.stdout, res.code)
	}
	if n, err := strconv.ParseInt(token, 10, 64); err != nil || n <= 0 {
		t.Fatalf("FENCELOCK_TOKEN=%q", token)
	}
}

// A signal sent to run reaches the command, and run exits with the command's code.
func TestRunForwardsSignals(t *testing.T) {
	r, env := redisEnv(t)
	p := startRun(t, env, "run", "sig", "--", "sh", "-c", `trap 'echo got-term; exit 3' TERM; while true; do sleep 0.05; done`)
	waitHeld(t, r, "sig")
	time.Sleep(200 * time.Millisecond) // the shell has set its trap
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.wait(t)
	if code != 3 || !strings.Contains(p.out.String(), "got-term") {
		t.Fatalf("code %d, output %q", code, p.out.String())
	}
	if held(t, r, "sig") {
		t.Fatal("lock still held after run ended")
	}
}

// A lock deleted from under a running command gets the command terminated and run exits 76.
func TestRunLostLock(t *testing.T) {
	r, env := redisEnv(t)
	p := startRun(t, env, "run", "--ttl", "1s", "lost", "--", "sleep", "600")
	waitHeld(t, r, "lost")
	rc := r.ClientT(t)
	if err := rc.Del(context.Background(), redisbackend.New(rc).Key("lost")).Err(); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t)
	if code != exitLost || !strings.Contains(p.errb.String(), "lost") {
		t.Fatalf("code %d, stderr %q", code, p.errb.String())
	}
	// Each line says "fencelock:" once, does not repeat the library's "lock lost", and says
	// why: the server told.
	for _, line := range strings.Split(strings.TrimSpace(p.errb.String()), "\n") {
		if strings.Count(line, "fencelock:") != 1 || strings.Contains(line, "lock lost") || !strings.Contains(line, "the server says") {
			t.Errorf("stderr line %q: want one prefix, no repeated \"lock lost\", and the reason", line)
		}
	}
}

func TestStatusListRelease(t *testing.T) {
	r, env := redisEnv(t)
	p := startRun(t, env, "run", "--ttl", "2s", "job:status", "--", "sleep", "600")
	waitHeld(t, r, "job:status")

	res := cli(t, 20*time.Second, env, "status", "--json", "job:status")
	var v lockView
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil || !v.Held || v.HoldCount != 1 || v.Token <= 0 {
		t.Fatalf("status: %q %v", res.stdout, err)
	}
	var holder struct {
		Host    string `json:"host"`
		PID     int    `json:"pid"`
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(v.Holder), &holder); err != nil || holder.PID != p.cmd.Process.Pid || holder.Command != "sleep" || holder.Host == "" {
		t.Fatalf("holder identity %q: %v", v.Holder, err)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(v.Holder)), "{") {
		t.Errorf("holder in --json: %s, want an object, not JSON in a string", v.Holder)
	}
	if res := cli(t, 20*time.Second, env, "status", "job:status"); !strings.Contains(res.stdout, "held") || !strings.Contains(res.stdout, fmt.Sprintf("sleep, pid %d on ", p.cmd.Process.Pid)) {
		t.Fatalf("status table: %q, want the holder as words", res.stdout)
	}
	// A semaphore of the lock's name, unrelated to it, is listed after the locks.
	sem := startRun(t, env, "run", "-n", "2", "job:status", "--", "sleep", "600")
	waitFor(t, 20*time.Second, "the permit was never held", func() bool { return permitsHeld(t, r, "job:status") == 1 })
	res = cli(t, 20*time.Second, env, "list", "--json", "job:")
	// Read as the locks it listed before, the output still has the lock first, as it was; the
	// semaphore after it has no "held", "owner" or "token" for a filter of locks to catch.
	var vs []lockView
	if err := json.Unmarshal([]byte(res.stdout), &vs); err != nil || len(vs) != 2 || vs[0].Name != "job:status" || !vs[0].Held || vs[0].Token != v.Token ||
		vs[1].Held || vs[1].Owner != "" || vs[1].Token != 0 {
		t.Fatalf("list --json read as locks: %q %v", res.stdout, err)
	}
	var listed []struct {
		Kind    string     `json:"kind"`
		Name    string     `json:"name"`
		Limit   int        `json:"limit"`
		InUse   int        `json:"in_use"`
		Waiting *int       `json:"waiting"`
		Permits []lockView `json:"permits"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &listed); err != nil || len(listed) != 2 || listed[0].Kind != "lock" || listed[1].Kind != "semaphore" {
		t.Fatalf("list --json: %q %v, want a lock and then a semaphore", res.stdout, err)
	}
	if s := listed[1]; s.Name != "job:status" || s.Limit != 2 || s.InUse != 1 || s.Waiting == nil || *s.Waiting != 0 || len(s.Permits) != 1 {
		t.Fatalf("list --json: the semaphore is %+v, want 1 of 2 permits in use, none waiting", s)
	}
	permit := listed[1].Permits[0]
	if err := json.Unmarshal(permit.Holder, &holder); err != nil || holder.PID != sem.cmd.Process.Pid || !permit.Held || permit.Owner == "" || permit.Token <= 0 || permit.TTLLeft <= 0 {
		t.Fatalf("list --json: the permit is %+v (%v), want run -n's, pid %d", permit, err, sem.cmd.Process.Pid)
	}
	res = cli(t, 20*time.Second, env, "list", "job:")
	lockRow := strings.Index(res.stdout, fmt.Sprintf("sleep, pid %d on ", p.cmd.Process.Pid))
	semLine := strings.Index(res.stdout, `semaphore "job:status": 1 of 2 permits held, 0 waiting`)
	permitRow := strings.Index(res.stdout, fmt.Sprintf("sleep, pid %d on ", sem.cmd.Process.Pid))
	if res.code != 0 || lockRow < 0 || semLine < lockRow || permitRow < semLine {
		t.Fatalf("list: code %d, stdout %q; want the lock, then the semaphore and its permit", res.code, res.stdout)
	}
	sem.stop(t)
	if res := cli(t, 20*time.Second, env, "list", "job:"); !strings.Contains(res.stdout, "no semaphores held") || strings.Contains(res.stdout, `semaphore "job:status"`) {
		t.Fatalf("list once the permit was released: %q", res.stdout)
	}
	if res := cli(t, 20*time.Second, env, "release", "job:status"); res.code != exitUsage || !strings.Contains(res.stderr, "--force") {
		t.Fatalf("release without --force: %d %q", res.code, res.stderr)
	}
	res = cli(t, 20*time.Second, env, "release", "--force", "job:status")
	if res.code != 0 || !strings.Contains(res.stdout, "removed job:status") || !strings.Contains(res.stdout, fmt.Sprint(v.Token)) {
		t.Fatalf("release --force: %d %q %q", res.code, res.stdout, res.stderr)
	}
	if code := p.wait(t); code != exitLost {
		t.Fatalf("the run whose lock was removed exited %d, want %d", code, exitLost)
	}
	if res := cli(t, 20*time.Second, env, "status", "job:status"); !strings.Contains(res.stdout, "free") {
		t.Fatalf("status after release: %q", res.stdout)
	}
}

func TestRunBadInput(t *testing.T) {
	_, env := redisEnv(t)
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  []string
		code int
	}{
		{[]string{"run", "x"}, env, exitUsage},
		{[]string{"run", "x", "--"}, env, exitUsage},
		{[]string{"run", "", "--", "true"}, env, exitUsage},
		{[]string{"run", strings.Repeat("n", maxNameLen+1), "--", "true"}, env, exitUsage},
		{[]string{"run", "--ttl", "1ms", "x", "--", "true"}, env, exitUsage},
		{[]string{"run", "--kill-after", "-1s", "x", "--", "true"}, env, exitUsage},
		{[]string{"run", "x", "--", "/nonexistent/command"}, env, exitNotFound},
		{[]string{"run", "x", "--", notExec}, env, exitNoExec},
		{[]string{"--backend", "mongodb://127.0.0.1", "run", "x", "--", "true"}, nil, exitUsage},
		{[]string{"--backend", "redis://127.0.0.1:1", "run", "x", "--", "true"}, nil, exitFailure},
		{[]string{"status"}, env, exitUsage},
		{[]string{"frobnicate"}, env, exitUsage},
	} {
		res := cli(t, 30*time.Second, tc.env, tc.args...)
		lines := strings.Count(strings.TrimSpace(res.stderr), "\n") + 1
		if res.code != tc.code || lines != 1 || strings.Contains(res.stderr, "goroutine") {
			t.Errorf("%q: code %d (want %d), stderr %q", tc.args, res.code, tc.code, res.stderr)
		}
	}
}

// running is a run process started in the background.
type running struct {
	cmd       *exec.Cmd
	out, errb *syncWriter
	done      chan int
}

func startRun(t *testing.T, env []string, args ...string) *running {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = noTerminal()
	p := &running{cmd: cmd, out: &syncWriter{w: &strings.Builder{}}, errb: &syncWriter{w: &strings.Builder{}}, done: make(chan int, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		p.done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *running) wait(t *testing.T) int {
	t.Helper()
	select {
	case c := <-p.done:
		p.done <- c
		return c
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not end; stderr %q", p.errb.String())
		return -1
	}
}

func (p *running) stop(t *testing.T) {
	select {
	case c := <-p.done:
		p.done <- c
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func held(t *testing.T, r *testserver.Redis, name string) bool {
	rc := r.ClientT(t)
	return rc.Exists(context.Background(), redisbackend.New(rc).Key(name)).Val() == 1
}

// permitsHeld returns how many permits of the semaphore name are held.
func permitsHeld(t *testing.T, r *testserver.Redis, name string) int {
	info, err := redisbackend.New(r.ClientT(t)).InspectSemaphore(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return len(info.Permits)
}

func waitHeld(t *testing.T, r *testserver.Redis, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !held(t, r, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never held", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redlock:// runs over independent servers; doctor flags one server listed twice.
func TestRedlockURL(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.StartRedis(t).Addr)
	}
	env := []string{"FENCELOCK_BACKEND=redlock://" + strings.Join(addrs, ",")}
	if res := cli(t, 30*time.Second, env, "run", "rl", "--", "sh", "-c", "exit 4"); res.code != 4 {
		t.Fatalf("run over redlock: %d %q", res.code, res.stderr)
	}
	// Redlock keeps no semaphores: list lists its locks, and says nothing of semaphores.
	startRun(t, env, "run", "rl-held", "--", "sleep", "600")
	waitFor(t, 20*time.Second, "rl-held was never listed", func() bool {
		return strings.Contains(cli(t, 30*time.Second, env, "list").stdout, "rl-held")
	})
	if res := cli(t, 30*time.Second, env, "list"); res.code != 0 || res.stderr != "" || strings.Contains(res.stdout, "semaphore") {
		t.Fatalf("list over redlock: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	var vs []lockView
	if res := cli(t, 30*time.Second, env, "list", "--json"); res.code != 0 || json.Unmarshal([]byte(res.stdout), &vs) != nil || len(vs) != 1 || vs[0].Name != "rl-held" {
		t.Fatalf("list --json over redlock: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	res := cli(t, 30*time.Second, env, "doctor", "--json")
	if !strings.Contains(res.stdout, `"independence"`) {
		t.Fatalf("doctor over redlock did not check independence: %s", res.stdout)
	}
	dup := []string{"FENCELOCK_BACKEND=redlock://" + addrs[0] + "," + addrs[1] + "," + addrs[0]}
	if res := cli(t, 30*time.Second, dup, "doctor"); res.code != exitFinding || !strings.Contains(res.stdout, "share run ID") {
		t.Fatalf("doctor with a server listed twice: %d %q", res.code, res.stdout)
	}
}

// A Redis out of memory under noeviction is a backend failure that may pass, not bad input:
// run exits 125, not 2 ("fix the URL"), and with --wait it waits on before it does.
func TestRunOnAServerOutOfMemory(t *testing.T) {
	r, env := redisEnv(t)
	rdb := r.ClientT(t)
	ctx := context.Background()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1mb"}} {
		if kv[0] == "maxmemory" {
			if err := rdb.Set(ctx, "ballast", strings.Repeat("x", 1<<20), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"run", "oom", "--", "true"}, {"run", "--wait", "300ms", "oom", "--", "true"}} {
		res := cli(t, 30*time.Second, env, args...)
		if res.code != exitFailure || !strings.Contains(res.stderr, "out of memory") {
			t.Errorf("%q on a full server: code %d (want %d), stderr %q", args, res.code, exitFailure, res.stderr)
		}
	}
}

// --max-hold ends a command that holds the lock too long as a lost lock does: exit 76, a line
// that names the cap, and the lock free for the next one at once.
func TestRunMaxHold(t *testing.T) {
	r, env := redisEnv(t)
	start := time.Now()
	res := cli(t, 30*time.Second, env, "run", "--ttl", "1s", "--max-hold", "1500ms", "--kill-after", "1s", "capped", "--", "sleep", "20")
	if res.code != exitLost || !strings.Contains(res.stderr, "WithMaxHold") {
		t.Fatalf("a command past --max-hold: exit %d (want %d), stderr %q", res.code, exitLost, res.stderr)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the command ran %v under a 1.5 s cap", took)
	}
	if held(t, r, "capped") {
		t.Fatal("the lock is still held once run exited at its cap")
	}
	if res := cli(t, 30*time.Second, env, "run", "--max-hold", "-1s", "x", "--", "true"); res.code != exitUsage {
		t.Fatalf("--max-hold -1s: exit %d, want %d", res.code, exitUsage)
	}
}

// --min-hold: a command that ends at once leaves the lock held until the minimum, which the
// store keeps by the lock's TTL once run has exited; a negative minimum, or one above
// --max-hold, is a usage error.
func TestRunMinHold(t *testing.T) {
	r, env := redisEnv(t)
	start := time.Now()
	if res := cli(t, 30*time.Second, env, "run", "--min-hold", "20s", "nightly-report", "--", "true"); res.code != 0 {
		t.Fatalf("a command under --min-hold: exit %d, stderr %q", res.code, res.stderr)
	}
	ran := time.Since(start)
	if ran >= 20*time.Second {
		t.Skipf("run took %v, past the minimum", ran)
	}
	if !held(t, r, "nightly-report") {
		t.Fatalf("the lock is free %v after the grant, within its 20 s minimum", ran)
	}
	rc := r.ClientT(t)
	if left, err := rc.PTTL(context.Background(), redisbackend.New(rc).Key("nightly-report")).Result(); err != nil || left <= 0 || left > 20*time.Second {
		t.Fatalf("the lock's TTL once run exited: %v, %v; want what is left of the 20 s minimum", left, err)
	}
	for _, args := range [][]string{{"--min-hold", "-1s"}, {"--min-hold", "2m", "--max-hold", "1m"}} {
		if res := cli(t, 30*time.Second, env, append(append([]string{"run"}, args...), "x", "--", "true")...); res.code != exitUsage {
			t.Fatalf("%v: exit %d, want %d", args, res.code, exitUsage)
		}
	}
}

// waitFor is testserver.WaitFor, under the name the tests of this package use.
var waitFor = testserver.WaitFor
