package safety

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

// Scenario is one run of the lock-set workload with paused workers.
type Scenario struct {
	Backend string // the URL the workers connect to
	Fenced  bool   // whether the store checks fencing tokens
	Workers int
	Cycles  int           // per worker
	Pauses  int           // SIGSTOPs, each 2×TTL, at random times and points of the cycle
	TTL     time.Duration // lock TTL
	Hold    time.Duration // the longest sleep between read and write
	// Spawn returns the command that runs one worker with cfg (the test binary re-executed).
	Spawn func(cfg WorkerConfig) *exec.Cmd
}

// Result is what a scenario observed.
type Result struct {
	Writes         int // writes the store received
	Acknowledged   int // additions the store acknowledged
	LostAdditions  int // acknowledged additions missing from the final set
	StaleAccepted  int // accepted writes whose token was older than one accepted before
	StaleRefused   int // writes the fenced store refused
	Overlaps       int // holds of different workers that overlapped in time (a paused holder's and its successor's)
	PausesDone     int
	WorkerFailures []string
}

// Run runs the scenario to the end.
func (sc Scenario) Run(ctx context.Context) (Result, error) {
	store := NewStore(sc.Fenced)
	url, stop, err := store.Serve()
	if err != nil {
		return Result{}, err
	}
	defer stop()

	var mu sync.Mutex // guards acks, holds, pids and failures
	var acks []int
	var holds []hold
	var failures []string
	pids := map[int]bool{}
	var wg sync.WaitGroup
	name := fmt.Sprintf("lockset-%d", time.Now().UnixNano())
	for id := 1; id <= sc.Workers; id++ {
		cmd := sc.Spawn(WorkerConfig{ID: id, Store: url, Backend: sc.Backend, Name: name, TTL: sc.TTL, Hold: sc.Hold, Cycles: sc.Cycles})
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return Result{}, err
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := testserver.StartChild(cmd); err != nil {
			return Result{}, err
		}
		mu.Lock()
		pids[cmd.Process.Pid] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, held := readWorker(stdout, id)
			err := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			acks = append(acks, got...)
			holds = append(holds, held...)
			delete(pids, cmd.Process.Pid)
			if err != nil {
				failures = append(failures, fmt.Sprintf("worker %d: %v: %s", id, err, strings.TrimSpace(stderr.String())))
			}
		}()
	}

	// The pauser stops a random live worker for 2×TTL, again and again, spread over the run.
	done := make(chan struct{})
	pausesDone := 0
	go func() {
		defer close(done)
		for pausesDone < sc.Pauses {
			select {
			case <-ctx.Done():
				return
			case <-time.After(sc.TTL/2 + rand.N(sc.TTL)):
			}
			mu.Lock()
			live := make([]int, 0, len(pids))
			for p := range pids {
				live = append(live, p)
			}
			mu.Unlock()
			if len(live) == 0 {
				return
			}
			p := live[rand.N(len(live))]
			if syscall.Kill(p, syscall.SIGSTOP) != nil {
				continue
			}
			time.Sleep(2 * sc.TTL)
			_ = syscall.Kill(p, syscall.SIGCONT)
			pausesDone++
		}
	}()
	wg.Wait()
	<-done

	final, log := store.Final()
	r := Result{Writes: len(log), Acknowledged: len(acks), PausesDone: pausesDone, WorkerFailures: failures, Overlaps: overlaps(holds)}
	in := make(map[int]bool, len(final))
	for _, x := range final {
		in[x] = true
	}
	for _, a := range acks {
		if !in[a] {
			r.LostAdditions++
		}
	}
	var newest int64
	for _, w := range log {
		switch {
		case !w.Accepted:
			r.StaleRefused++
		case w.Token < newest:
			r.StaleAccepted++
		}
		if w.Accepted {
			newest = max(newest, w.Token)
		}
	}
	return r, nil
}

// hold is one time a worker held the lock, on this machine's clock (Unix ns).
type hold struct {
	worker   int
	from, to int64
}

// overlaps counts the pairs of holds by different workers that overlap in time.
func overlaps(holds []hold) int {
	slices.SortFunc(holds, func(a, b hold) int { return cmp.Compare(a.from, b.from) })
	n := 0
	for i, h := range holds {
		for _, later := range holds[i+1:] {
			if later.from >= h.to {
				break
			}
			if later.worker != h.worker {
				n++
			}
		}
	}
	return n
}

// readWorker reads a worker's output: its acknowledged additions and its holds.
func readWorker(r io.Reader, worker int) ([]int, []hold) {
	var acks []int
	var holds []hold
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "ack "); ok {
			if n, err := strconv.Atoi(v); err == nil {
				acks = append(acks, n)
			}
		} else if v, ok := strings.CutPrefix(line, "hold "); ok {
			var h hold
			if _, err := fmt.Sscan(v, &h.from, &h.to); err == nil {
				h.worker = worker
				holds = append(holds, h)
			}
		}
	}
	slices.Sort(acks)
	return acks, holds
}
