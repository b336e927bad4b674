package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/internal/testserver"
)

// server is one redis-server process started for the run, on 127.0.0.1.
type server struct {
	*testserver.Redis
	admin *redis.Client // INFO and FLUSHALL; never used by a contender
}

// servers are the redis-server processes of one run: node 0 serves every single-node scenario,
// nodes 0-4 the Redlock scenario. They are started on demand and stopped by close.
type servers struct {
	nodes []*server
	pinTo int // the CPU the servers are pinned to, -1 when not pinned
}

func (s *servers) start(n int) ([]string, error) {
	for len(s.nodes) < n {
		r, err := testserver.NewRedis()
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, &server{Redis: r, admin: redis.NewClient(&redis.Options{Addr: r.Addr})})
	}
	if err := s.pin(); err != nil {
		return nil, err
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = s.nodes[i].Addr
	}
	return addrs, nil
}

// pids returns the process IDs of the servers started, in the order of their addresses.
func (s *servers) pids() []int {
	out := make([]int, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.PID()
	}
	return out
}

// pin sets the affinity of every thread of every server again: redis-server starts threads
// of its own (bio, jemalloc) after it first answers.
func (s *servers) pin() error {
	if s.pinTo < 0 {
		return nil
	}
	for _, n := range s.nodes {
		if err := pinProcess(n.PID(), s.pinTo); err != nil {
			return err
		}
	}
	return nil
}

// flush empties every server between scenarios, so that one scenario's keys do not weigh on
// the next.
func (s *servers) flush(ctx context.Context) error {
	for _, n := range s.nodes {
		if err := n.admin.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (s *servers) close() error {
	var err error
	for _, n := range s.nodes {
		err = errors.Join(err, n.admin.Close(), n.Close())
	}
	s.nodes = nil
	return err
}

// pingRTT is the median of n PING round trips from a fresh go-redis client to node 0: the
// cost of one round trip between this program and the servers where they run.
func (s *servers) pingRTT(ctx context.Context, n int) (time.Duration, error) {
	c := newGoRedis(s.nodes[0].Addr)
	defer c.Close()
	d := make(durations, 0, n)
	for range n + n/10 {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		d = append(d, time.Since(t0))
	}
	return d[n/10:].sorted().quantile(0.5), nil
}

// info returns one numeric field of an INFO section of the server.
func info(ctx context.Context, c *redis.Client, section, field string) (float64, error) {
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	v, ok := infoField(text, field)
	if !ok {
		return 0, fmt.Errorf("INFO %s has no numeric field %s", section, field)
	}
	return v, nil
}

// infoField finds "field:value" in INFO output and parses the value as a number.
func infoField(text, field string) (float64, bool) {
	v, ok := infoText(text, field)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil
}

func infoText(text, field string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// pinProcess sets the CPU affinity of every thread of process pid to cpu alone, as
// `taskset -a -p -c cpu pid` does.
func pinProcess(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("pin process %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pin thread %d of process %d to CPU %d: %w", tid, pid, cpu, err)
		}
	}
	return nil
}

// pinSelf moves every thread of this process to cpu and runs Go on one P there, which is
// what starting the program under `taskset -c cpu` would give. Threads the runtime starts
// later inherit the affinity of the thread that starts them; a second pass catches a thread
// started during the first.
func pinSelf(cpu int) error {
	for range 2 {
		if err := pinProcess(os.Getpid(), cpu); err != nil {
			return err
		}
	}
	runtime.GOMAXPROCS(1)
	return nil
}

// cpuTime is the CPU time, in seconds, this process has used.
func cpuTime() float64 { return procCPU(os.Getpid()) }

// procCPU returns the CPU time, in seconds, that the threads of process pid have used, from
// the scheduler's own count (/proc/PID/task/TID/schedstat, in ns). getrusage and INFO cpu
// are sampled at the timer tick on this kernel (CONFIG_TICK_CPU_ACCOUNTING), which charges a
// process that wakes for 20µs a whole 4ms tick now and then: useless for a mostly idle one.
func procCPU(pid int) float64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f, _, _ := strings.Cut(string(b), " ")
		if v, err := strconv.ParseInt(f, 10, 64); err == nil {
			ns += v
		}
	}
	return float64(ns) / 1e9
}
