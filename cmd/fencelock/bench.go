package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock"
)

func init() { commands = append(commands, newBenchCmd) }

// Bounds of bench's flags: enough for any honest measurement, small enough that a typo does
// not open thousands of connections or run for a day.
const (
	benchMaxWorkers  = 256
	benchMaxOps      = 10_000_000
	benchMaxDuration = 10 * time.Minute
	// benchOpsCap bounds each phase in time when only --ops is given.
	benchOpsCap = time.Minute
	// benchCallTimeout bounds one release, and a waiter's wait beyond the TTL.
	benchCallTimeout = 5 * time.Second
)

type benchOptions struct {
	duration time.Duration // per phase
	ops      int64         // per phase; 0 = until duration
	workers  int
	ttl      time.Duration
	name     string
}

// benchReport is what bench prints with --json.
type benchReport struct {
	Backend     string            `json:"backend"`
	Name        string            `json:"name"`
	TTLMS       int64             `json:"ttl_ms"`
	Uncontended uncontendedResult `json:"uncontended"`
	Contended   contendedResult   `json:"contended"`
	Handoff     handoffResult     `json:"handoff"`
}

type uncontendedResult struct {
	Ops       int64        `json:"ops"`
	Seconds   float64      `json:"seconds"`
	OpsPerSec float64      `json:"ops_per_sec"`
	Latency   latencyStats `json:"latency"` // TryObtain + Release
}

type contendedResult struct {
	Workers            int     `json:"workers"`
	Acquisitions       int64   `json:"acquisitions"`
	Seconds            float64 `json:"seconds"`
	AcquisitionsPerSec float64 `json:"acquisitions_per_sec"`
	// OwnerChanges counts acquisitions by another worker than the previous holder.
	OwnerChanges       int64   `json:"owner_changes"`
	OwnerChangesPerSec float64 `json:"owner_changes_per_sec"`
	// Fairness is Jain's index over PerWorker: 1 when every worker got as many, 1/workers when
	// one got them all.
	Fairness  float64 `json:"fairness_jain"`
	PerWorker []int64 `json:"per_worker"`
	// Overlaps counts acquisitions made while another worker still held the lock: always 0
	// unless the lock failed.
	Overlaps int64 `json:"overlaps"`
	// Lost counts releases that found the lock no longer held (it expired under the holder).
	Lost int64 `json:"lost"`
}

type handoffResult struct {
	Handoffs int64   `json:"handoffs"`
	Seconds  float64 `json:"seconds"`
	// Latency runs from the holder's Release returning to the waiter's Obtain returning.
	Latency latencyStats `json:"latency"`
	// AheadOfRelease counts handoffs where the waiter held the lock before the holder's Release
	// returned (the release's reply was slower than the wake-up); Latency counts them as 0.
	AheadOfRelease int64 `json:"ahead_of_release"`
}

func newBenchCmd(g *globals) *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure lock latency, contention and handoff on the backend",
		Long: `bench measures the backend in three phases, each bounded by --duration and --ops:

  uncontended  one client: TryObtain + Release in a loop; latency histogram
               (p50/p90/p99/max) and operations per second
  contended    --workers clients, each its own connection and fencelock client like
               separate processes, loop Obtain + Release on one lock; acquisitions and
               owner changes per second, and Jain's fairness index over the workers
               (1 = every worker got as many, 1/workers = one got them all)
  handoff      a holder releases while a waiter is blocked in Obtain; latency from the
               holder's Release returning to the waiter holding the lock

The lock is --name; bench refuses to start when someone else holds it. Progress goes to
stderr when stderr is a terminal; --json prints the numbers for scripts.

Exit status: 0 done; 2 bad flags or backend URL; 75 the lock is held by someone else;
125 the backend failed or the run was interrupted.`,
		Example: `  # five seconds per phase against the default backend
  fencelock bench

  # a fixed amount of work, as JSON
  fencelock bench --ops 10000 --workers 16 --json | jq .contended.fairness_jain

  # a Cluster, one second per phase, with a short TTL
  fencelock bench --backend redis+cluster://10.0.0.1:7000 --duration 1s --ttl 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(cmd.Flags().Changed("duration")); err != nil {
				return err
			}
			return runBench(cmd.Context(), g, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 5*time.Second, "how long each phase runs (with --ops alone: at most "+benchOpsCap.String()+")")
	f.Int64Var(&o.ops, "ops", 0, "operations per phase: obtain+release pairs, acquisitions, handoffs (0: run for --duration)")
	f.IntVar(&o.workers, "workers", 8, "clients contending for the lock in the contended phase")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "the lock's TTL")
	f.StringVar(&o.name, "name", "bench", "the lock to measure with; nobody else should use it")
	return cmd
}

// check validates the flags before any connection is made.
func (o *benchOptions) check(durationSet bool) error {
	switch {
	case o.workers < 1 || o.workers > benchMaxWorkers:
		return exitf(exitUsage, "--workers must be between 1 and %d, got %d", benchMaxWorkers, o.workers)
	case o.ttl < fencelock.MinTTL:
		return checkTTL(o.ttl)
	case o.ttl%time.Millisecond != 0:
		return exitf(exitUsage, "--ttl %v is not a whole number of milliseconds", o.ttl)
	case o.duration <= 0 || o.duration > benchMaxDuration:
		return exitf(exitUsage, "--duration must be positive and at most %v, got %v", benchMaxDuration, o.duration)
	case o.ops < 0 || o.ops > benchMaxOps:
		return exitf(exitUsage, "--ops must be between 0 and %d, got %d", benchMaxOps, o.ops)
	case o.name == "":
		return exitf(exitUsage, "--name must not be empty")
	}
	if o.ops > 0 && !durationSet {
		o.duration = benchOpsCap
	}
	return nil
}

func runBench(ctx context.Context, g *globals, o benchOptions, stdout, stderr io.Writer) error {
	raw := g.backendURL()
	s, err := openStore(raw)
	if err != nil {
		return err
	}
	defer func() { _ = s.close() }()
	if err := s.ping(ctx); err != nil {
		return err
	}
	prog := newBenchProgress(stderr)
	defer prog.clear()

	rep := benchReport{Backend: s.url, Name: o.name, TTLMS: o.ttl.Milliseconds()}
	var solo *latencyHist
	if rep.Uncontended, solo, err = benchUncontended(ctx, s, o, prog); err != nil {
		return benchFailed(ctx, "uncontended", err)
	}
	if rep.Contended, err = benchContended(ctx, raw, o, prog); err != nil {
		return benchFailed(ctx, "contended", err)
	}
	// A queued waiter is given a few uncontended round trips to take its place in line.
	settle := min(max(5*solo.quantile(0.5), time.Millisecond), time.Second)
	if rep.Handoff, err = benchHandoff(ctx, raw, o, settle, prog); err != nil {
		return benchFailed(ctx, "handoff", err)
	}
	prog.clear()

	if g.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitf(exitFailure, "writing the report: %v", err)
		}
	} else {
		printBench(stdout, rep, o)
	}
	if rep.Contended.Overlaps > 0 {
		fmt.Fprintf(stderr, "fencelock: warning: %d acquisitions overlapped another holder: the lock did not exclude; run fencelock doctor\n", rep.Contended.Overlaps)
	}
	return nil
}

// benchFailed turns a phase's error into an exit: an interrupt, a lock held by someone else,
// or the library's own mapping.
func benchFailed(ctx context.Context, phase string, err error) error {
	var ex *exitError
	switch {
	case errors.As(err, &ex):
		return err
	case ctx.Err() != nil:
		return exitf(exitFailure, "bench interrupted during the %s phase", phase)
	case errors.Is(err, fencelock.ErrNotObtained):
		return &exitError{code: exitConflict, err: fmt.Errorf("%s phase: %w; is another bench running? Choose another --name", phase, err)}
	}
	return errorExit(fmt.Errorf("%s phase: %w", phase, err))
}

func printBench(w io.Writer, r benchReport, o benchOptions) {
	fmt.Fprintf(w, "Benchmarking %s with lock %q, TTL %v\n\n", r.Backend, r.Name, o.ttl)
	u := r.Uncontended
	fmt.Fprintf(w, "Uncontended: TryObtain + Release, one client\n")
	fmt.Fprintf(w, "  %d ops in %v: %.0f ops/s\n", u.Ops, secDur(u.Seconds), u.OpsPerSec)
	printLatency(w, u.Latency)

	c := r.Contended
	fmt.Fprintf(w, "\nContended: Obtain + Release on one lock, %d %s\n", c.Workers, plural(c.Workers, "client", "clients"))
	fmt.Fprintf(w, "  %d acquisitions in %v: %.0f/s; %d owner changes: %.0f/s\n",
		c.Acquisitions, secDur(c.Seconds), c.AcquisitionsPerSec, c.OwnerChanges, c.OwnerChangesPerSec)
	fmt.Fprintf(w, "  fairness (Jain) %.3f over per-client counts %v\n", c.Fairness, c.PerWorker)
	if c.Lost > 0 {
		fmt.Fprintf(w, "  %d locks expired under their holder before release: raise --ttl\n", c.Lost)
	}
	if c.Overlaps > 0 {
		fmt.Fprintf(w, "  %d ACQUISITIONS OVERLAPPED ANOTHER HOLDER\n", c.Overlaps)
	}

	hd := r.Handoff
	fmt.Fprintf(w, "\nHandoff: holder's Release returns → blocked waiter holds the lock\n")
	fmt.Fprintf(w, "  %d handoffs in %v", hd.Handoffs, secDur(hd.Seconds))
	if hd.AheadOfRelease > 0 {
		fmt.Fprintf(w, "; in %d the waiter held the lock before Release returned (counted as 0)", hd.AheadOfRelease)
	}
	fmt.Fprintln(w)
	printLatency(w, hd.Latency)
}

func secDur(s float64) time.Duration {
	return roundDur(time.Duration(s * float64(time.Second)))
}
