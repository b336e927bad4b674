package safety

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"
)

// inject carries out the faults at their times, each in a goroutine of its own, until the
// run's end; a fault whose target is still under an earlier fault is left out. It returns once
// every fault has been undone: every worker and server runs again, every link forwards.
func (h *nemesisHarness) inject(faults []faultPlan, until time.Time) {
	var wg sync.WaitGroup
	for _, f := range faults {
		at := h.start.Add(f.At)
		if at.After(until) {
			break
		}
		time.Sleep(time.Until(at))
		wg.Go(func() { h.fault(f) })
	}
	time.Sleep(time.Until(until))
	wg.Wait()
}

// claim marks target busy; it fails when a fault is already on it.
func (h *nemesisHarness) claim(target string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy[target] {
		return false
	}
	h.busy[target] = true
	return true
}

func (h *nemesisHarness) unclaim(target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.busy, target)
}

func (h *nemesisHarness) fault(f faultPlan) {
	servers := len(h.c.targets)
	s := f.Other % servers
	switch f.Kind {
	case "pause-worker":
		h.pauseWorker(f)
	case "pause-server", "restart-server":
		target := fmt.Sprintf("server %d", s)
		if !h.claim(target) {
			return
		}
		defer h.unclaim(target)
		from := time.Now()
		if f.Kind == "pause-server" {
			if h.c.pause(s) != nil {
				return
			}
			time.Sleep(f.D)
			_ = h.c.resume(s)
		} else if h.c.restart(s) != nil {
			return
		}
		h.note(faultRecord{Kind: f.Kind, From: from.UnixNano(), To: time.Now().UnixNano(), Worker: -1, Server: s, DataLoss: f.Kind == "restart-server" && h.c.dataLoss})
	case "cut", "blackhole", "delay":
		w := f.Target % h.run.Workers
		target := fmt.Sprintf("link %d-%d", w, s)
		if !h.claim(target) {
			return
		}
		defer h.unclaim(target)
		p := h.proxies[w][s]
		from := time.Now()
		switch f.Kind {
		case "cut":
			p.Cut()
		case "blackhole":
			p.Blackhole()
		default:
			p.SetDelay(time.Duration(1+f.Target%60) * time.Millisecond)
		}
		time.Sleep(f.D)
		p.SetDelay(0)
		p.Restore()
		h.note(faultRecord{Kind: f.Kind, From: from.UnixNano(), To: time.Now().UnixNano(), Worker: w, Server: s})
	case "oom":
		target := fmt.Sprintf("server %d", s)
		if !h.claim(target) {
			return
		}
		defer h.unclaim(target)
		from := time.Now()
		if h.c.oom(s, true) != nil {
			_ = h.c.oom(s, false)
			return
		}
		time.Sleep(f.D)
		for range 5 { // a server left full would fail the rest of the run
			if h.c.oom(s, false) == nil {
				break
			}
		}
		h.note(faultRecord{Kind: f.Kind, From: from.UnixNano(), To: time.Now().UnixNano(), Worker: -1, Server: s})
	case "delete-key":
		name := h.names[f.Target%len(h.names)]
		// One server in three deletions, or all of them (with the line and fence counter).
		i, all := f.Other%(servers+1), f.Other%3 == 0
		from := time.Now()
		if h.c.deleteKey(name, i, all) == nil {
			server := i
			if i >= servers {
				server = -1
			}
			h.note(faultRecord{Kind: f.Kind, From: from.UnixNano(), To: time.Now().UnixNano(), Worker: -1, Server: server, Name: name, DataLoss: true})
		}
	}
}

// pauseWorker stops a worker with SIGSTOP for f.D: one found in the state f.Class asks for
// (waiting in Obtain, holding, releasing, leading under Election.Lead) when there is one, else
// any; for holding, one that holds a lock under a shared owner first.
func (h *nemesisHarness) pauseWorker(f faultPlan) {
	h.mu.Lock()
	var shared, in, all []int
	for w, states := range h.states {
		if _, ok := h.pids[w]; !ok || h.busy[fmt.Sprintf("worker %d", w)] {
			continue
		}
		all = append(all, w)
		if slices.Contains(slices.Collect(maps.Values(states)), "holding-shared") {
			shared = append(shared, w)
		}
		for _, st := range states {
			if st == f.Class || f.Class == "holding" && (st == "holding-shared" || st == "leading") {
				in = append(in, w)
				break
			}
		}
	}
	h.mu.Unlock()
	slices.Sort(shared)
	slices.Sort(in)
	slices.Sort(all)
	// A holder under an owner that other workers share is the one whose stop tells whether
	// they trust a hold that lives in its session (ZooKeeper) or under its renewals (Redis).
	if f.Class == "holding" && len(shared) > 0 {
		in = shared
	}
	if len(in) == 0 {
		in = all
	}
	if len(in) == 0 {
		return
	}
	w := in[f.Target%len(in)]
	if f.Pinned {
		w = f.Target
		h.awaitState(w, f.Class, time.Second)
	}
	target := fmt.Sprintf("worker %d", w)
	if !h.claim(target) {
		return
	}
	defer h.unclaim(target)
	h.mu.Lock()
	pid, ok := h.pids[w]
	h.mu.Unlock()
	from := time.Now()
	if !ok || syscall.Kill(pid, syscall.SIGSTOP) != nil {
		return
	}
	time.Sleep(f.D)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	to := time.Now()
	h.mu.Lock()
	h.pauses[w] = append(h.pauses[w], interval{from.UnixNano(), to.Add(pauseGrace).UnixNano()})
	h.mu.Unlock()
	h.note(faultRecord{Kind: f.Kind + " (" + f.Class + ")", From: from.UnixNano(), To: to.UnixNano(), Worker: w, Server: -1})
}

// awaitState waits up to limit for a thread of worker w to be in state.
func (h *nemesisHarness) awaitState(w int, state string, limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		in := slices.Contains(slices.Collect(maps.Values(h.states[w])), state)
		h.mu.Unlock()
		if in {
			return
		}
	}
}

func (h *nemesisHarness) note(r faultRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, r)
}
