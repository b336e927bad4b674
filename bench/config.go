package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenarioNames in the order they run.
var scenarioNames = []string{"latency", "throughput", "contention", "handoff", "redlock", "watchdog", "loss", "semaphore", "election", "sizing"}

// config is one run's settings. Zero counts and durations in the flags take the mode's
// defaults.
type config struct {
	mode              string // "full", "quick" or "tiny" (the unit test)
	scenarios         []string
	match             *regexp.Regexp // contenders to run; the floor always runs
	rounds            int
	warmup            int
	cycles            int           // latency: obtain+release cycles per contender
	throughput        time.Duration // per contender
	goroutines        int
	contention        time.Duration // per contender
	workers           int
	critical          time.Duration
	handoffs          int           // samples per contender
	handoffBudget     time.Duration // wall time per contender
	redlockCycles     int
	watchdogLocks     int
	watchdogTTL       time.Duration
	watchdogIntervals int
	lossSamples       int           // loss: deleted keys per library
	sizingCallers     []int         // sizing: the counts of callers stepped through
	sizingStep        time.Duration // sizing: time per count of callers
	pin               bool
	timeout           time.Duration
	writeDocs         bool
	docs              string
	cpuProfile        string // file for a CPU profile of the whole run; none when empty
	command           string // the command line, for the docs

	log   io.Writer // progress; nothing is written when nil
	start time.Time
}

// progress notes a step of the run on cfg.log, with the time since the run started.
func (c *config) progress(format string, args ...any) {
	if c.log == nil {
		return
	}
	fmt.Fprintf(c.log, "bench: %v ", time.Since(c.start).Round(time.Second))
	fmt.Fprintf(c.log, format+"\n", args...)
}

// modes are the defaults of each mode. full is what docs/PERFORMANCE.md comes from; quick
// finishes in well under two minutes; tiny is for the unit test and measures nothing.
var modes = map[string]config{
	"full": {rounds: 10, warmup: 200, cycles: 20000, throughput: 4 * time.Second, goroutines: 32,
		contention: 5 * time.Second, workers: 8, critical: 20 * time.Microsecond,
		handoffs: 300, handoffBudget: 25 * time.Second, redlockCycles: 10000,
		watchdogLocks: 10000, watchdogTTL: 3 * time.Second, watchdogIntervals: 5, lossSamples: 100,
		sizingCallers: []int{1, 4, 16, 64}, sizingStep: 3 * time.Second},
	"quick": {rounds: 4, warmup: 100, cycles: 2000, throughput: time.Second, goroutines: 32,
		contention: 1200 * time.Millisecond, workers: 8, critical: 20 * time.Microsecond,
		handoffs: 40, handoffBudget: 3 * time.Second, redlockCycles: 1000,
		watchdogLocks: 2000, watchdogTTL: 1500 * time.Millisecond, watchdogIntervals: 3, lossSamples: 20,
		sizingCallers: []int{1, 8, 32}, sizingStep: 500 * time.Millisecond},
	"tiny": {rounds: 2, warmup: 2, cycles: 20, throughput: 40 * time.Millisecond, goroutines: 4,
		contention: 60 * time.Millisecond, workers: 3, critical: 20 * time.Microsecond,
		handoffs: 2, handoffBudget: time.Second, redlockCycles: 10,
		watchdogLocks: 30, watchdogTTL: 300 * time.Millisecond, watchdogIntervals: 1, lossSamples: 2,
		sizingCallers: []int{1, 2}, sizingStep: 40 * time.Millisecond},
}

// limits bound every count and duration a flag can set, so that a run always ends.
const (
	maxCycles   = 1_000_000
	maxDuration = 5 * time.Minute
	maxWorkers  = 256
	maxLocks    = 100_000
)

func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	var (
		quick      = fs.Bool("quick", false, "quick mode: smaller counts, finishes in under 2 minutes")
		scenarios  = fs.String("scenarios", strings.Join(scenarioNames, ","), "comma-separated scenarios to run: "+strings.Join(scenarioNames, ", "))
		contenders = fs.String("contenders", "", "regular expression: run only contenders whose name matches (the floor always runs)")
		c          config
	)
	fs.IntVar(&c.rounds, "rounds", 0, "rounds that contenders are interleaved in (default: full 10, quick 4)")
	fs.IntVar(&c.cycles, "cycles", 0, "latency: uncontended obtain+release cycles per contender (default: full 20000, quick 2000)")
	fs.DurationVar(&c.throughput, "throughput-time", 0, "throughput: time per contender (default: full 4s, quick 1s)")
	fs.IntVar(&c.goroutines, "goroutines", 0, "throughput: goroutines, each on a name of its own (default 32)")
	fs.DurationVar(&c.contention, "contention-time", 0, "contention: time per contender (default: full 5s, quick 1.2s)")
	fs.IntVar(&c.workers, "workers", 0, "contention: workers on one lock, each with a client of its own (default 8)")
	fs.DurationVar(&c.critical, "critical", 0, "contention: length of the critical section, spent busy (default 20µs)")
	fs.IntVar(&c.handoffs, "handoffs", 0, "handoff: samples per contender (default: full 300, quick 40)")
	fs.DurationVar(&c.handoffBudget, "handoff-budget", 0, "handoff: most wall time per contender (default: full 25s, quick 3s)")
	fs.IntVar(&c.redlockCycles, "redlock-cycles", 0, "redlock: cycles per contender (default: full 10000, quick 1000)")
	fs.IntVar(&c.watchdogLocks, "watchdog-locks", 0, "watchdog: locks held at once by one client (default: full 10000, quick 2000)")
	fs.DurationVar(&c.watchdogTTL, "watchdog-ttl", 0, "watchdog: TTL of the held locks; renewed every TTL/3 (default: full 3s, quick 1.5s)")
	fs.IntVar(&c.watchdogIntervals, "watchdog-intervals", 0, "watchdog: renewal intervals measured (default: full 5, quick 3)")
	fs.IntVar(&c.lossSamples, "loss-samples", 0, "loss: deleted keys per library (default: full 100, quick 20)")
	fs.Func("sizing-callers", "sizing: comma-separated counts of concurrent callers (default: full 1,4,16,64, quick 1,8,32)", func(v string) error {
		c.sizingCallers = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			c.sizingCallers = append(c.sizingCallers, n)
		}
		return nil
	})
	fs.DurationVar(&c.sizingStep, "sizing-step", 0, "sizing: time per count of callers (default: full 3s, quick 500ms)")
	fs.BoolVar(&c.pin, "pin", true, "pin the redis-server processes to CPU 0 and this program to CPU 1 (GOMAXPROCS 1), when there are 2 CPUs or more")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "stop the run after this long")
	fs.BoolVar(&c.writeDocs, "write-docs", false, "write the results to docs/PERFORMANCE.md of the fencelock checkout (see -docs)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof); best with -contenders and -scenarios narrowed to what is studied")
	fs.StringVar(&c.docs, "docs", "", "file -write-docs writes (default: docs/PERFORMANCE.md in the fencelock checkout that holds the working directory)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./bench [flags]   (from the fencelock checkout)

Runs fencelock and its peers side by side against the same redis-server processes, which it
starts on free ports of 127.0.0.1 and stops at the end, and prints each figure with its ratio
to the floor: a bare SET NX PX and compare-and-delete script on one go-redis client.

Scenarios: latency (uncontended obtain+release), throughput (%d goroutines on their own names),
contention (workers with their own clients on one name), handoff (release to a blocked waiter),
redlock (5 nodes against 1), watchdog (thousands of locks held and renewed by one client),
loss (how soon a holder learns that its key was deleted).

Flags:
`, 32)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	mode := "full"
	if *quick {
		mode = "quick"
	}
	c.mode = mode
	var visited []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "docs" {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && f.Value.String() == "true" {
			visited = append(visited, "-"+f.Name)
			return
		}
		visited = append(visited, "-"+f.Name+"="+f.Value.String())
	})
	c.command = strings.TrimSpace("go run ./bench " + strings.Join(visited, " "))
	if err := c.finish(*scenarios, *contenders); err != nil {
		return nil, err
	}
	return &c, nil
}

// finish fills in the mode's defaults and checks the bounds.
func (c *config) finish(scenarios, contenders string) error {
	d := modes[c.mode]
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.rounds, d.rounds)
	setInt(&c.warmup, d.warmup)
	setInt(&c.cycles, d.cycles)
	setDur(&c.throughput, d.throughput)
	setInt(&c.goroutines, d.goroutines)
	setDur(&c.contention, d.contention)
	setInt(&c.workers, d.workers)
	setDur(&c.critical, d.critical)
	setInt(&c.handoffs, d.handoffs)
	setDur(&c.handoffBudget, d.handoffBudget)
	setInt(&c.redlockCycles, d.redlockCycles)
	setInt(&c.watchdogLocks, d.watchdogLocks)
	setDur(&c.watchdogTTL, d.watchdogTTL)
	setInt(&c.watchdogIntervals, d.watchdogIntervals)
	setInt(&c.lossSamples, d.lossSamples)
	setDur(&c.sizingStep, d.sizingStep)
	if len(c.sizingCallers) == 0 {
		c.sizingCallers = d.sizingCallers
	}
	if c.timeout == 0 {
		c.timeout = 30 * time.Minute
	}

	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(scenarioNames, s) {
			return fmt.Errorf("unknown scenario %q: choose from %s", s, strings.Join(scenarioNames, ", "))
		}
		if !slices.Contains(c.scenarios, s) {
			c.scenarios = append(c.scenarios, s)
		}
	}
	if len(c.scenarios) == 0 {
		return fmt.Errorf("no scenario chosen")
	}
	if contenders != "" {
		re, err := regexp.Compile(contenders)
		if err != nil {
			return fmt.Errorf("-contenders: %w", err)
		}
		c.match = re
	}

	checks := []struct {
		name  string
		v, hi int
	}{
		{"rounds", c.rounds, 1000}, {"cycles", c.cycles, maxCycles}, {"goroutines", c.goroutines, 4096},
		{"workers", c.workers, maxWorkers}, {"handoffs", c.handoffs, 100_000},
		{"redlock-cycles", c.redlockCycles, maxCycles}, {"watchdog-locks", c.watchdogLocks, maxLocks},
		{"watchdog-intervals", c.watchdogIntervals, 100}, {"loss-samples", c.lossSamples, 10_000},
	}
	for _, n := range c.sizingCallers {
		checks = append(checks, struct {
			name  string
			v, hi int
		}{"sizing-callers", n, maxWorkers})
	}
	for _, k := range checks {
		if k.v < 1 || k.v > k.hi {
			return fmt.Errorf("-%s must be between 1 and %d, got %d", k.name, k.hi, k.v)
		}
	}
	durs := []struct {
		name  string
		v, lo time.Duration
		hi    time.Duration
	}{
		{"throughput-time", c.throughput, time.Millisecond, maxDuration},
		{"contention-time", c.contention, time.Millisecond, maxDuration},
		{"critical", c.critical, time.Nanosecond, time.Second},
		{"handoff-budget", c.handoffBudget, time.Millisecond, maxDuration},
		{"watchdog-ttl", c.watchdogTTL, 30 * time.Millisecond, time.Minute},
		{"sizing-step", c.sizingStep, time.Millisecond, maxDuration},
		{"timeout", c.timeout, time.Second, 3 * time.Hour},
	}
	for _, k := range durs {
		if k.v < k.lo || k.v > k.hi {
			return fmt.Errorf("-%s must be between %v and %v, got %v", k.name, k.lo, k.hi, k.v)
		}
	}
	if c.watchdogTTL%time.Millisecond != 0 {
		return fmt.Errorf("-watchdog-ttl must be a whole number of milliseconds, got %v", c.watchdogTTL)
	}
	return nil
}

func (c *config) runs(scenario string) bool { return slices.Contains(c.scenarios, scenario) }

// selected returns the entries to run: those the filter matches, and the floor.
func (c *config) selected() []*Entry {
	var out []*Entry
	for _, e := range entries() {
		if e.Floor || c.match == nil || c.match.MatchString(e.Label()) {
			out = append(out, e)
		}
	}
	return out
}
