// Command bench runs fencelock and its peers side by side against the same redis-server
// processes, and reports each figure with its ratio to a floor: a bare SET NX PX and a
// compare-and-delete script on one go-redis client. From the fencelock checkout:
//
//	go run ./bench -h
//	go run ./bench -quick                 # under 2 minutes
//	go run ./bench -write-docs            # the full run behind docs/PERFORMANCE.md
//
// It is a module of its own, so that the peers never enter fencelock's dependencies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"

	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
)

func main() {
	etcdtest.ServeIfAsked() // the sizing scenario's etcd member runs in this program, started again
	cfg, err := parseFlags(newFlagSet(), os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

// run runs the scenarios of cfg, prints the report to out and progress to log, and writes the
// docs when asked.
func run(ctx context.Context, cfg *config, out, log io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	facts := gatherFacts()
	cfg.log, cfg.start = log, facts.date
	srv := &servers{pinTo: -1}
	defer func() { err = errors.Join(err, srv.close()) }()
	if cfg.pin {
		if facts.cpus >= 2 {
			srv.pinTo = 0
			if err := pinSelf(1); err != nil {
				return err
			}
			facts.pinning = "redis-server processes on CPU 0, this program on CPU 1 with GOMAXPROCS 1 (sched_setaffinity on every thread, as taskset -a would)"
		} else {
			facts.pinning = "none: only one CPU"
		}
	} else {
		facts.pinning = "none (-pin=false)"
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	rep := &report{cfg: cfg, facts: facts}
	es := cfg.selected()
	single := filter(es, func(e *Entry) bool { return e.Nodes == 1 })
	step := func(name string, f func() error) error {
		if !cfg.runs(name) {
			return nil
		}
		cfg.progress("%s...", name)
		if err := srv.flush(ctx); err != nil {
			return err
		}
		if err := srv.pin(); err != nil {
			return err
		}
		if err := f(); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			// One scenario's failure is reported, and the others still run.
			cfg.progress("%s failed: %v", name, err)
			rep.failed = append(rep.failed, fmt.Sprintf("%s: %v", name, err))
		}
		return nil
	}
	addrs, err := srv.start(1)
	if err != nil {
		return err
	}
	rep.facts.redis = redisVersion(ctx, srv.nodes[0].admin)
	if err := srv.pin(); err != nil {
		return err
	}
	if rep.facts.ping, err = srv.pingRTT(ctx, 2000); err != nil {
		return err
	}
	uncontended := filter(single, func(e *Entry) bool { return e.Uncontended })
	waiting := filter(single, func(e *Entry) bool { return e.Waits })
	steps := []struct {
		name string
		f    func() error
	}{
		{"latency", func() (err error) {
			rep.latency, err = runLatency(ctx, cfg, uncontended, addrs, srv.pids(), cfg.cycles, "lat")
			return err
		}},
		{"throughput", func() (err error) {
			rep.throughput, err = runThroughput(ctx, cfg, uncontended, srv.nodes[0])
			return err
		}},
		{"contention", func() (err error) {
			rep.contention, err = runContention(ctx, cfg, waiting, addrs)
			return err
		}},
		{"handoff", func() (err error) {
			rep.handoff, err = runHandoff(ctx, cfg, waiting, addrs)
			return err
		}},
		{"redlock", func() error {
			five, err := srv.start(5)
			if err != nil {
				return err
			}
			if err := srv.pin(); err != nil {
				return err
			}
			rep.redlock, err = runRedlock(ctx, cfg, es, five, srv.pids())
			return err
		}},
		{"watchdog", func() (err error) {
			rep.watchdog, err = runWatchdog(ctx, cfg, srv.nodes[0])
			return err
		}},
		{"loss", func() (err error) {
			rep.loss, err = runLoss(ctx, cfg, srv.nodes[0])
			return err
		}},
		{"semaphore", func() (err error) {
			rep.semaphore, err = runSemaphore(ctx, cfg, srv.nodes[0])
			return err
		}},
		{"election", func() (err error) {
			rep.election, err = runElection(ctx, cfg)
			return err
		}},
		{"sizing", func() error {
			rep.sizing = runSizing(ctx, cfg, srv.nodes[0].Addr, srv.nodes[0].PID(), srv.pinTo)
			return ctx.Err()
		}},
	}
	for _, s := range steps {
		if err := step(s.name, s.f); err != nil {
			return err
		}
	}
	rep.facts.finish()
	text := rep.markdown()
	if _, err := io.WriteString(out, text); err != nil {
		return err
	}
	if cfg.writeDocs {
		path, err := docsPath(cfg.docs)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
		if err := rep.writeCharts(filepath.Dir(path)); err != nil {
			return err
		}
		fmt.Fprintf(log, "bench: wrote %s\n", path)
	}
	return nil
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

func filter(es []*Entry, keep func(*Entry) bool) []*Entry {
	var out []*Entry
	for _, e := range es {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}
