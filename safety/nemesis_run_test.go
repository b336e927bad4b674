package safety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

// nemesisRun is one run of the nemesis against one backend.
type nemesisRun struct {
	Seed     uint64
	Workers  int
	Threads  int
	Names    int
	Duration time.Duration
	Broken   map[int]string // worker → broken modes (see brokenModes)
	// Lease makes the lock threads draw lease policies (drawLease); the regression seeds, found
	// before there were any, replay without.
	Lease bool
	// Faults replaces the faults drawn from the seed, for the broken-worker runs.
	Faults func(r *rand.Rand, d time.Duration) []faultPlan
}

// nemesisHarness is the state of a run in progress.
type nemesisHarness struct {
	run     nemesisRun
	c       *nemesisCluster
	proxies [][]*testserver.Proxy // [worker][server]
	names   []string
	start   time.Time

	mu     sync.Mutex // guards everything below
	events []nemEvent
	states map[int]map[int]string // worker → thread → state
	pids   map[int]int            // worker → pid, while it runs
	faults []faultRecord
	pauses map[int][]interval
	noTTL  map[string]bool
	exits  []string
	// upstream: workers that the race detector ended for go-zookeeper's known race alone
	upstream []string
	busy     map[string]bool // fault targets in use
}

// runNemesis runs r against c and returns what it recorded.
func runNemesis(t *testing.T, c *nemesisCluster, r nemesisRun) *nemesisHistory {
	t.Helper()
	h := &nemesisHarness{run: r, c: c, states: map[int]map[int]string{}, pids: map[int]int{}, pauses: map[int][]interval{},
		noTTL: map[string]bool{}, busy: map[string]bool{}}
	seeds := rand.New(rand.NewPCG(r.Seed, 0x6e656d65736973))
	for i := range r.Names {
		h.names = append(h.names, fmt.Sprintf("nem-%d-%d", r.Seed%100000, i))
	}
	store := &nemesisStore{}
	url, stopStore, err := store.serve()
	if err != nil {
		t.Fatal(err)
	}
	defer stopStore()
	h.proxies = make([][]*testserver.Proxy, r.Workers)
	for w := range r.Workers {
		for _, target := range c.targets {
			h.proxies[w] = append(h.proxies[w], testserver.StartProxy(t, target))
		}
	}
	var faults []faultPlan
	if fseed := seeds.Uint64(); r.Faults != nil {
		faults = r.Faults(rand.New(rand.NewPCG(fseed, 1)), r.Duration)
	} else {
		faults = planFaults(rand.New(rand.NewPCG(fseed, 1)), r.Duration, c.can)
		faults = planMore(faults, rand.New(rand.NewPCG(fseed, 2)), r.Duration, c.can("oom"))
	}
	groups := []string{fmt.Sprintf("group-%d-a", r.Seed), fmt.Sprintf("group-%d-b", r.Seed)}

	h.start = time.Now()
	until := h.start.Add(r.Duration)
	var workers sync.WaitGroup
	for w := range r.Workers {
		var addrs []string
		for _, p := range h.proxies[w] {
			addrs = append(addrs, p.Addr)
		}
		cfg := nemesisWorkerConfig{ID: w, Seed: seeds.Uint64(), Backend: c.kind, Client: c.client, Addrs: addrs, Session: c.session, Store: url,
			Names: h.names, Groups: groups, Threads: r.Threads, Permits: c.permits(), Elections: true, Live: true, Lease: r.Lease, Until: until.UnixNano(), MinTTL: c.minTTL, MaxTTL: c.maxTTL, Broken: r.Broken[w]}
		if err := h.spawn(&workers, cfg); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	scanned := make(chan struct{})
	go func() { defer close(scanned); h.scanKeys(ctx) }()
	h.inject(faults, until)
	h.waitWorkers(&workers, 90*time.Second)
	cancel()
	<-scanned
	h.recordNoTTL(c.keysWithoutTTL(context.Background()))

	h.mu.Lock()
	defer h.mu.Unlock()
	return &nemesisHistory{Backend: c.kind, Events: h.events, Writes: store.writes(), Faults: h.faults, Pauses: h.pauses,
		NoTTL: slices.Sorted(mapKeys(h.noTTL)), Exits: h.exits, Upstream: h.upstream}
}

// spawn starts one worker process; it dies with the test binary (testserver.StartChild).
func (h *nemesisHarness) spawn(wg *sync.WaitGroup, cfg nemesisWorkerConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nemesisWorkerEnv+"="+string(b))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := testserver.StartChild(cmd); err != nil {
		return err
	}
	h.mu.Lock()
	h.pids[cfg.ID] = cmd.Process.Pid
	h.states[cfg.ID] = map[int]string{}
	h.mu.Unlock()
	wg.Go(func() {
		readEvents(stdout, h.record)
		err := cmd.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.pids, cfg.ID)
		switch {
		case raceExit(err) && upstreamZKRace(stderr.String()):
			h.upstream = append(h.upstream, fmt.Sprintf("worker %d: %v: go-zookeeper's own data race on Conn.lastZxid", cfg.ID, err))
		case err != nil && strings.Contains(stderr.String(), "SIGQUIT"):
			// Stopped by waitWorkers: its goroutines' stacks say where it hung.
			path := filepath.Join(os.TempDir(), fmt.Sprintf("fencelock-nemesis-seed%d-worker%d.stacks", h.run.Seed, cfg.ID))
			_ = os.WriteFile(path, []byte(stderr.String()), 0o644)
			h.exits = append(h.exits, fmt.Sprintf("worker %d: %v: its goroutines' stacks are in %s", cfg.ID, err, path))
		case err != nil:
			h.exits = append(h.exits, fmt.Sprintf("worker %d: %v: %s", cfg.ID, err, oneLine(strings.TrimSpace(stderr.String()))))
		}
	})
	return nil
}

func (h *nemesisHarness) record(e nemEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.K == "state" {
		h.states[e.W][e.Th] = e.State
		return
	}
	h.events = append(h.events, e)
}

// waitWorkers waits for the workers to finish, and kills those still running after limit.
func (h *nemesisHarness) waitWorkers(wg *sync.WaitGroup, limit time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(limit):
	}
	// SIGQUIT first: the Go runtime writes every goroutine's stack to the worker's stderr, which
	// its exit reports, and exits; SIGKILL for one that does not.
	h.mu.Lock()
	for w, pid := range h.pids {
		h.exits = append(h.exits, fmt.Sprintf("worker %d still running %v after the run: killed", w, limit))
		_ = syscall.Kill(pid, syscall.SIGQUIT)
	}
	h.mu.Unlock()
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	h.mu.Lock()
	for _, pid := range h.pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	h.mu.Unlock()
	<-done
}

// scanKeys looks for Redis keys without a TTL every 300ms until ctx ends.
func (h *nemesisHarness) scanKeys(ctx context.Context) {
	if h.c.direct == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		h.recordNoTTL(h.c.keysWithoutTTL(ctx))
	}
}

func (h *nemesisHarness) recordNoTTL(keys []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		h.noTTL[k] = true
	}
}

// raceExit reports whether a worker ended with the race detector's exit status, 66, and not
// for a failure of its own (a panic exits with 2).
func raceExit(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == 66
}

// upstreamZKRace reports whether a worker's stderr holds data races of go-zookeeper's alone:
// its receive loop writes Conn.lastZxid while a reconnect reads it for the watches and the
// handshake, unsynchronized (go-zookeeper/zk v1.0.4, conn.go; github.com/go-zookeeper/zk/pull/35,
// github.com/samuel/go-zookeeper/issues/260). Any other race, or any frame of this module's
// on top of either access, is a failure.
func upstreamZKRace(stderr string) bool {
	reports := strings.Split(stderr, "WARNING: DATA RACE")
	if len(reports) < 2 {
		return false
	}
	for _, r := range reports[1:] {
		lines := strings.Split(r, "\n")
		var tops []string
		for i, l := range lines {
			if t := strings.TrimSpace(l); (strings.HasPrefix(t, "Write at") || strings.HasPrefix(t, "Read at") ||
				strings.HasPrefix(t, "Previous write at") || strings.HasPrefix(t, "Previous read at")) && i+1 < len(lines) {
				tops = append(tops, strings.TrimSpace(lines[i+1]))
			}
		}
		if len(tops) != 2 {
			return false
		}
		for _, top := range tops {
			if !strings.HasPrefix(top, "github.com/go-zookeeper/zk.(*Conn).recvLoop(") &&
				!strings.HasPrefix(top, "github.com/go-zookeeper/zk.(*Conn).sendSetWatches(") &&
				!strings.HasPrefix(top, "github.com/go-zookeeper/zk.(*Conn).authenticate(") {
				return false
			}
		}
	}
	return true
}
