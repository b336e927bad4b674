package safety

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/fencelock/fencelock/internal/testserver"
)

// runnerInvocation is one `fencelock run` started by a runner.
type runnerInvocation struct {
	runner     int
	kind       string
	pid        int
	start, end int64
	code       int
	hung       bool
}

// runnerHarness runs `fencelock run` again and again from a few runners, each through a
// proxy of its own, while it stops run processes, cuts their links and deletes the lock.
type runnerHarness struct {
	bin, name, store string
	c                *nemesisCluster
	proxies          []*testserver.Proxy

	mu      sync.Mutex  // guards everything below
	running map[int]int // runner → pid of its run process
	runs    []runnerInvocation
	faults  []faultRecord
	pauses  map[int][]interval
}

// `fencelock run` under the nemesis: commands that fork a background writer, read the terminal,
// or ignore SIGTERM, run under one lock from three runners while the nemesis stops the run
// processes, cuts their links and deletes the lock. Two commands must never write while both
// believe they hold the lock: a write of a command not yet told (SIGTERM) that it lost the lock
// must not come after a write of a later holder, unless its run process was stopped or the
// lock deleted (the cases docs/SAFETY.md names); the fenced store accepts no stale write; and
// every run ends.
func TestNemesisRun(t *testing.T) {
	seed, d := nemesisSeeds(t)[0], nemesisDuration(t)
	h := &runnerHarness{bin: buildFencelock(t), name: fmt.Sprintf("nem-run-%d", seed), c: startRedisNemesis(t, 1),
		running: map[int]int{}, pauses: map[int][]interval{}}
	store := &nemesisStore{}
	url, stop, err := store.serve()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	h.store = url
	const runners = 3
	for range runners {
		h.proxies = append(h.proxies, testserver.StartProxy(t, h.c.targets[0]))
	}
	t.Logf("seed %d: %d runners for %v", seed, runners, d)
	seeds := rand.New(rand.NewPCG(seed, 0x72756e))
	until := time.Now().Add(d)
	var wg sync.WaitGroup
	for k := range runners {
		r := rand.New(rand.NewPCG(seeds.Uint64(), uint64(k)))
		wg.Go(func() { h.loop(t, k, r, until) })
	}
	h.inject(rand.New(rand.NewPCG(seeds.Uint64(), 9)), until)
	wg.Wait()
	h.killCommands(store.writes())

	hist := &nemesisHistory{Backend: "redis", Writes: store.writes()}
	v := &nemesisVerdict{Found: map[string]int{}, Samples: map[string][]string{}, Workers: map[string][]int{}}
	hist.checkStore(v)
	h.checkRunners(v, hist.Writes)
	kinds := map[string]int{}
	for _, r := range h.runs {
		kinds[fmt.Sprintf("%s exit %d", r.kind, r.code)]++
	}
	t.Logf("seed %d: %d runs (%v), %d writes (%d refused), %d faults", seed, len(h.runs), kinds, v.Writes, v.Refused, len(h.faults))
	if len(h.runs) == 0 || v.Writes == 0 {
		t.Fatalf("seed %d: %d runs, %d writes: the run tested nothing", seed, len(h.runs), v.Writes)
	}
	if f := v.failures(true); len(f) > 0 {
		t.Errorf("seed %d found:\n  %s\nreplay: FENCELOCK_NEMESIS_SEED=%d FENCELOCK_NEMESIS_DURATION=%v go test -race -count=1 -run TestNemesisRun ./safety/",
			seed, strings.Join(f, "\n  "), seed, d)
	}
}

const (
	chkInterleave = "run: a command wrote, not told of the loss, after a later holder's write"
	chkHung       = "run: did not end"
)

// buildFencelock builds the fencelock command into a temporary directory.
func buildFencelock(t *testing.T) string {
	t.Helper()
	bin := t.TempDir() + "/fencelock"
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "../cmd/fencelock"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fencelock: %v\n%s", err, out)
	}
	return bin
}

// loop starts one `fencelock run` after another until the end of the run.
func (h *runnerHarness) loop(t *testing.T, k int, r *rand.Rand, until time.Time) {
	for time.Now().Before(until) {
		kind := []string{"fork", "tty", "noterm"}[r.IntN(3)]
		ttl := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}[r.IntN(3)]
		inv, err := h.start(k, kind, ttl)
		if err != nil {
			t.Errorf("runner %d: %v", k, err)
			return
		}
		h.mu.Lock()
		h.runs = append(h.runs, inv)
		h.mu.Unlock()
	}
}

// start runs `fencelock run` once, with a pseudo-terminal as its controlling terminal for a
// command that reads it, and waits for it, killing it when it has not ended in time.
func (h *runnerHarness) start(k int, kind string, ttl time.Duration) (runnerInvocation, error) {
	args := []string{"--backend", "redis://" + h.proxies[k].Addr, "run", "--ttl", ttl.String(), "--wait", "3s", "--kill-after", "300ms",
		h.name, "--", os.Args[0], "-test.run=^$"}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), nemesisCommandEnv+"="+kind, "FENCELOCK_NEMESIS_STORE="+h.store, "FENCELOCK_NEMESIS_RUNNER="+strconv.Itoa(k))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	var tty *os.File
	if kind == "tty" {
		master, slave, err := openPTY()
		if err != nil {
			return runnerInvocation{}, err
		}
		defer master.Close()
		defer slave.Close()
		tty = master
		cmd.Stdin = slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if err := testserver.StartChild(cmd); err != nil {
		return runnerInvocation{}, err
	}
	inv := runnerInvocation{runner: k, kind: kind, pid: cmd.Process.Pid, start: time.Now().UnixNano()}
	h.mu.Lock()
	h.running[k] = inv.pid
	h.mu.Unlock()
	if tty != nil {
		_, _ = tty.Write([]byte("go\n"))
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(3*time.Second + 1500*time.Millisecond + 2*ttl + 10*time.Second):
		inv.hung = true
		_ = cmd.Process.Kill()
		err = <-exited
	}
	h.mu.Lock()
	delete(h.running, k)
	h.mu.Unlock()
	inv.end = time.Now().UnixNano()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		inv.code = ee.ExitCode()
	}
	return inv, nil
}

// openPTY opens a pseudo-terminal pair.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// inject stops a runner's run process, cuts its link, or deletes the lock, every 300ms to
// 1.2s, until the end of the run.
func (h *runnerHarness) inject(r *rand.Rand, until time.Time) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for time.Now().Before(until) {
		time.Sleep(time.Duration(300+r.IntN(900)) * time.Millisecond)
		k, kind := r.IntN(len(h.proxies)), r.IntN(4)
		d := []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond, 2500 * time.Millisecond}[r.IntN(3)]
		wg.Go(func() { h.fault(k, kind, d) })
	}
}

func (h *runnerHarness) fault(k, kind int, d time.Duration) {
	from := time.Now()
	rec := faultRecord{From: from.UnixNano(), Worker: k, Server: -1}
	switch kind {
	case 0, 1:
		h.mu.Lock()
		pid, ok := h.running[k]
		h.mu.Unlock()
		if !ok || syscall.Kill(pid, syscall.SIGSTOP) != nil {
			return
		}
		time.Sleep(d)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		rec.Kind = "pause-run"
		h.mu.Lock()
		h.pauses[k] = append(h.pauses[k], interval{from.UnixNano(), time.Now().Add(pauseGrace).UnixNano()})
		h.mu.Unlock()
	case 2:
		h.proxies[k].Cut()
		time.Sleep(d)
		h.proxies[k].Restore()
		rec.Kind = "cut"
	case 3:
		if h.c.deleteKey(h.name, 0, false) != nil {
			return
		}
		rec.Kind, rec.Worker, rec.Name, rec.DataLoss = "delete-key", -1, h.name, true
	}
	rec.To = time.Now().UnixNano()
	h.mu.Lock()
	h.faults = append(h.faults, rec)
	h.mu.Unlock()
}

// checkRunners flags a write of a command that had not been told of a loss, decided after a
// write of a later holder (a greater token), unless its run process was stopped or the lock
// deleted in the 5s before; and every run that did not end.
func (h *runnerHarness) checkRunners(v *nemesisVerdict, writes []storedWrite) {
	var top storedWrite
	for _, w := range writes {
		if w.Token > top.Token {
			top = w
		}
		if w.Termed || top.Token <= w.Token {
			continue
		}
		if h.excused(w.Worker, w.At-int64(5*time.Second), w.At) {
			v.Named++
			continue
		}
		v.flag(chkInterleave, w.Worker, "runner %d's %s wrote with token %d, not told, %v after runner %d's %s wrote with %d",
			w.Worker, w.Holder, w.Token, time.Duration(w.At-top.At), top.Worker, top.Holder, top.Token)
	}
	v.Found[chkInterleave] += 0
	v.Found[chkHung] += 0
	for _, r := range h.runs {
		if r.hung {
			v.flag(chkHung, r.runner, "runner %d's run of a %s command was still running %v after it started: killed", r.runner, r.kind, time.Duration(r.end-r.start))
		}
	}
}

func (h *runnerHarness) excused(runner int, from, to int64) bool {
	for _, f := range h.faults {
		if f.To >= from && f.From <= to && (f.Kind == "delete-key" || (f.Kind == "pause-run" && f.Worker == runner)) {
			return true
		}
	}
	return false
}

// killCommands kills the commands that outlived their run (a hung run's command, a background
// writer), found by the process IDs their writes carry.
func (h *runnerHarness) killCommands(writes []storedWrite) {
	self, err := os.Executable()
	if err != nil {
		return
	}
	seen := map[int]bool{}
	for _, w := range writes {
		if _, pid, ok := strings.Cut(w.Holder, "/"); ok {
			n, err := strconv.Atoi(pid)
			if err != nil || seen[n] {
				continue
			}
			seen[n] = true
			// Only a process still running this test binary: the ID may have been reused.
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", n)); err == nil && exe == self {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
	}
}
