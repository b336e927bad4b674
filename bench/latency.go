package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// latencyRow is one contender's uncontended obtain+release cycles.
type latencyRow struct {
	entry         *Entry
	cycles        int
	p50, p90, p99 time.Duration
	allocs, bytes float64 // per cycle, net of the background, a fresh name each cycle
	allocsOne     float64 // the same, every cycle on one name
	serverUs      float64 // CPU time of the redis-server processes per cycle, in µs
	background    rate    // what the process allocates per second while idle
	failures      int
	firstErr      error
}

// runLatency measures uncontended cycles: one goroutine, a fresh name per cycle, TryObtain
// then Release. Timing interleaves the contenders cycle by cycle, in a fresh random order
// each step, so that drift on the machine, and the garbage one contender leaves for the next
// to collect, hit all alike. Allocations are counted in a pass of their own, a contender at a
// time, as runtime.MemStats deltas less the process's idle background.
func runLatency(ctx context.Context, cfg *config, es []*Entry, addrs []string, pids []int, cycles int, tag string) ([]latencyRow, error) {
	cs, err := connectAll(es, addrs)
	if err != nil {
		return nil, err
	}
	defer closeAll(cs)
	rows := make([]latencyRow, len(es))
	for i := range es {
		rows[i].entry = es[i]
		// Warm up: connections, scripts loaded, pools filled.
		for k := range cfg.warmup {
			if err := warmCycle(ctx, cs[i], fmt.Sprintf("%s:warm:%d:%d", tag, i, k)); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", es[i].Label(), err)
			}
		}
	}
	if err := countAllocs(ctx, cs, rows, min(cycles, allocCycles), tag); err != nil {
		return nil, err
	}
	clocks, err := openServerClocks(pids)
	if err != nil {
		return nil, err
	}
	defer clocks.close()
	serverNs := make([]int64, len(es))
	samples := make([]durations, len(es))
	for i := range samples {
		samples[i] = make(durations, 0, cycles)
	}
	order := make([]int, len(es))
	for i := range order {
		order[i] = i
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for k := range cycles {
		if k%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		rnd.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			name := tag + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(k)
			s0 := clocks.read(es[i].Nodes)
			t0 := time.Now()
			err := cycle(ctx, cs[i], name)
			d := time.Since(t0)
			serverNs[i] += clocks.read(es[i].Nodes) - s0
			if err != nil {
				rows[i].failures++
				if rows[i].firstErr == nil {
					rows[i].firstErr = err
				}
				continue
			}
			samples[i] = append(samples[i], d)
		}
	}
	for i := range rows {
		s := samples[i].sorted()
		rows[i].cycles = cycles
		rows[i].p50, rows[i].p90, rows[i].p99 = s.quantile(0.5), s.quantile(0.9), s.quantile(0.99)
		rows[i].serverUs = float64(serverNs[i]) / 1e3 / float64(cycles)
	}
	return rows, nil
}

// allocCycles is how many cycles per contender the allocation count runs: allocations
// barely vary from cycle to cycle.
const allocCycles = 2000

// countAllocs runs n cycles of each contender in turn and sets rows' allocs and bytes per
// cycle: runtime.MemStats deltas, less what the process allocates meanwhile while idle. It
// counts twice: a fresh name each cycle (allocs, bytes), and one name every cycle (allocsOne),
// which a contender that keeps what it made of a recent name's keys does not make again.
func countAllocs(ctx context.Context, cs []Contender, rows []latencyRow, n int, tag string) error {
	bg, err := background(ctx)
	if err != nil {
		return err
	}
	names := make([]string, n)
	for i, c := range cs {
		rows[i].background = bg
		for k := range names {
			names[k] = tag + ":allocs:" + strconv.Itoa(i) + ":" + strconv.Itoa(k)
		}
		allocs, bytes := countCycles(ctx, c, &rows[i], names, bg)
		rows[i].allocs, rows[i].bytes = allocs, bytes
		for k := range names {
			names[k] = tag + ":allocs-one:" + strconv.Itoa(i)
		}
		rows[i].allocsOne, _ = countCycles(ctx, c, &rows[i], names, bg)
	}
	return nil
}

// countCycles runs a cycle of c on each of names and returns the allocations and bytes per
// cycle, less the background; a failure counts in row.
func countCycles(ctx context.Context, c Contender, row *latencyRow, names []string, bg rate) (allocs, bytes float64) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	for _, name := range names {
		if err := cycle(ctx, c, name); err != nil {
			row.failures++
			if row.firstErr == nil {
				row.firstErr = err
			}
		}
	}
	took := time.Since(start).Seconds()
	runtime.ReadMemStats(&m1)
	n := float64(len(names))
	return max(float64(m1.Mallocs-m0.Mallocs)-bg.allocs*took, 0) / n, max(float64(m1.TotalAlloc-m0.TotalAlloc)-bg.bytes*took, 0) / n
}

// serverClocks read the CPU time of the servers' main threads, which parse and run every
// command and write every reply, from the scheduler's count (schedstat, in ns). They are read
// around each timed cycle, outside its timing: the servers do nothing else meanwhile, so the
// difference is that cycle's server time, measured in the same interleaved order as the
// latency. (INFO commandstats would count each command a script calls twice, in the script's
// time and in its own, and leave out reading and writing.)
type serverClocks struct{ files []*os.File }

func openServerClocks(pids []int) (*serverClocks, error) {
	c := &serverClocks{}
	for _, p := range pids {
		f, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/schedstat", p, p))
		if err != nil {
			c.close()
			return nil, err
		}
		c.files = append(c.files, f)
	}
	return c, nil
}

// read returns the CPU time, in ns, of the first n servers' main threads.
func (c *serverClocks) read(n int) int64 {
	var buf [64]byte
	var total int64
	for _, f := range c.files[:n] {
		k, _ := f.ReadAt(buf[:], 0)
		field, _, _ := strings.Cut(string(buf[:k]), " ")
		v, _ := strconv.ParseInt(field, 10, 64)
		total += v
	}
	return total
}

func (c *serverClocks) close() {
	for _, f := range c.files {
		_ = f.Close()
	}
}

// rate is allocations and bytes per second.
type rate struct{ allocs, bytes float64 }

// backgroundWindow is how long the idle allocation rate is measured: four ticks of go-zero's
// 250ms CPU sampler.
const backgroundWindow = time.Second

// background measures what the process allocates per second with every contender connected
// and idle: their clients' housekeeping, and go-zero's CPU sampler. It is subtracted from
// each contender's count, pro rata of the time its cycles took.
func background(ctx context.Context) (rate, error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	if err := sleep(ctx, backgroundWindow); err != nil {
		return rate{}, err
	}
	took := time.Since(start).Seconds()
	runtime.ReadMemStats(&m1)
	return rate{float64(m1.Mallocs-m0.Mallocs) / took, float64(m1.TotalAlloc-m0.TotalAlloc) / took}, nil
}

// warmCycle is cycle for a warm-up, tried up to 5 times, 100 ms apart, on a fresh name each
// time: a warm-up measures nothing, and a peer's short default timeouts can miss on a machine
// busy with other work. A cycle that fails in a measurement is counted as a failure.
func warmCycle(ctx context.Context, c Contender, name string) error {
	var err error
	for try := range 5 {
		if err = cycle(ctx, c, fmt.Sprintf("%s:%d", name, try)); err == nil {
			return nil
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	return err
}

// cycle is one uncontended obtain and release.
func cycle(ctx context.Context, c Contender, name string) error {
	h, err := c.TryObtain(ctx, name)
	if err != nil {
		return fmt.Errorf("obtain: %w", err)
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// connectAll makes one contender per entry; on an error it closes those already made.
func connectAll(es []*Entry, addrs []string) ([]Contender, error) {
	cs := make([]Contender, 0, len(es))
	for _, e := range es {
		c, err := e.New(addrs[:e.Nodes])
		if err != nil {
			closeAll(cs)
			return nil, fmt.Errorf("%s: connect: %w", e.Label(), err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeAll(cs []Contender) {
	for _, c := range cs {
		_ = c.Close()
	}
}
