package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newDemoCmd) }

type demoFlags struct {
	workers, orders int
	stock           int64
	ttl             time.Duration
}

func newDemoCmd(g *globals) *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show the oversell that distributed locks and fencing tokens prevent",
		Long: `A product has 100 in stock. Several worker processes race to sell 1,000 orders through a
store that records every write: each reads the stock and writes it back one lower. The demo runs
four ways and shows the outcome of each:

  no lock                 workers overwrite each other's writes: lost updates, oversold
  lock                    one seller at a time: exactly 100 sold
  lock, paused holders    a holder is stopped (SIGSTOP) past its TTL with its write in flight;
                          another worker takes the lock, and the late write overwrites its
                          sales: two holders at once, oversold again
  lock + fencing          the same pauses, but the store refuses writes whose fencing token is
                          older than one it has seen: the stale writes are refused, exactly
                          100 sold

With no --backend it starts a real etcd inside this process, on loopback, so it needs nothing
installed. With --backend (or FENCELOCK_BACKEND) it runs on that backend.`,
		Example: `  fencelock demo
  fencelock demo --backend redis://127.0.0.1:6379 --workers 8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return demo(cmd.Context(), g, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().IntVar(&f.workers, "workers", 4, "worker processes")
	cmd.Flags().IntVar(&f.orders, "orders", 1000, "orders to process")
	cmd.Flags().Int64Var(&f.stock, "stock", 100, "items in stock")
	cmd.Flags().DurationVar(&f.ttl, "ttl", 2*time.Second, "lock TTL (etcd's minimum is 2s)")
	return cmd
}

func demo(ctx context.Context, g *globals, f *demoFlags, stdout, stderr io.Writer) error {
	switch {
	case f.workers < 2 || f.workers > 64:
		return exitf(exitUsage, "--workers %d: want 2 to 64 (a race needs two)", f.workers)
	case f.orders < 1 || f.orders > 1_000_000:
		return exitf(exitUsage, "--orders %d: want 1 to 1000000", f.orders)
	case f.stock < 1 || int(f.stock) > f.orders:
		return exitf(exitUsage, "--stock %d: want 1 to --orders", f.stock)
	case f.ttl < time.Second:
		return exitf(exitUsage, "--ttl %v: want at least 1s", f.ttl)
	}
	self, err := os.Executable()
	if err != nil {
		return exitf(exitFailure, "finding this program to start workers: %v", err)
	}
	backend := g.backend
	if backend == "" {
		backend = os.Getenv("FENCELOCK_BACKEND")
	}
	if backend == "" {
		fmt.Fprintln(stderr, "starting a real etcd inside this process (127.0.0.1, temporary directory)...")
		e, err := startEmbeddedEtcd()
		if err != nil {
			return exitf(exitFailure, "%v", err)
		}
		defer e.close()
		backend = e.url
	} else {
		st, err := openStore(backend)
		if err != nil {
			return err
		}
		err = st.ping(ctx)
		_ = st.close()
		if err != nil {
			return err
		}
	}

	store := &demoStore{}
	storeURL, stop, err := store.serve()
	if err != nil {
		return exitf(exitFailure, "starting the demo store: %v", err)
	}
	defer stop()

	// Pause the writers of two early sales, while there is stock left for others to sell.
	pauses := []int{max(int(f.stock)/10, 1), max(int(f.stock)/2, 2)}
	pause := f.ttl + f.ttl/2 + time.Second
	modes := []struct {
		mode, title string
		fenced      bool
		pauses      []int
	}{
		{modeNoLock, "no lock", false, nil},
		{modeLock, "lock", false, nil},
		{modePaused, "lock, paused holders", false, pauses},
		{modeFenced, "lock + fencing, paused holders", true, pauses},
	}
	var results []demoResult
	for _, m := range modes {
		store.reset(f.stock, f.orders, m.fenced, m.pauses, pause)
		start := time.Now()
		if err := runWorkers(ctx, self, backend, storeURL, m.mode, m.title, f, store, stderr); err != nil {
			return err
		}
		results = append(results, store.result(m.title, f.stock, time.Since(start)))
	}
	if g.json {
		return writeJSON(stdout, struct {
			Backend string       `json:"backend"`
			Workers int          `json:"workers"`
			Orders  int          `json:"orders"`
			Stock   int64        `json:"stock"`
			Results []demoResult `json:"results"`
		}{redactRaw(backend), f.workers, f.orders, f.stock, results})
	}
	fmt.Fprintf(stdout, "\n%d worker processes, %d orders, %d in stock, backend %s\n\n", f.workers, f.orders, f.stock, redactRaw(backend))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tsold\tfinal stock\toversold\tlost updates\tstale writes refused\ttime\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.1fs\t\n", r.Mode, r.Sold, r.FinalStock, r.Oversold, r.LostUpdates, r.StaleRefused, r.Seconds)
	}
	_ = tw.Flush()
	fmt.Fprintln(stdout, `
A lock alone is advice: a holder paused past its TTL still writes when it wakes. The fencing
token makes the store refuse that write.`)
	return nil
}

// runWorkers runs one mode's worker processes to the end, showing progress on stderr.
func runWorkers(ctx context.Context, self, backend, storeURL, mode, title string, f *demoFlags, store *demoStore, stderr io.Writer) error {
	procs := make([]*exec.Cmd, f.workers)
	done := make(chan error, f.workers)
	for i := range procs {
		var out strings.Builder
		p := exec.CommandContext(ctx, self, "demo-worker", "--store", storeURL, "--mode", mode, "--ttl", f.ttl.String())
		p.Env = append(os.Environ(), "FENCELOCK_BACKEND="+backend)
		p.Stderr = &out
		if err := p.Start(); err != nil {
			return exitf(exitFailure, "starting a worker: %v", err)
		}
		procs[i] = p
		go func() {
			err := p.Wait()
			if err != nil {
				err = fmt.Errorf("worker %d: %v: %s", p.Process.Pid, err, strings.TrimSpace(out.String()))
			}
			done <- err
		}()
	}
	terminal := isTerminal(stderr)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var firstErr error
	for running := f.workers; running > 0; {
		select {
		case err := <-done:
			running--
			if err != nil && firstErr == nil {
				firstErr = err
			}
		case <-tick.C:
			if terminal {
				taken, orders := store.progress()
				fmt.Fprintf(stderr, "\r  %-32s %d/%d orders", title, taken, orders)
			}
		}
	}
	taken, orders := store.progress()
	if terminal {
		fmt.Fprintf(stderr, "\r  %-32s %d/%d orders\n", title, taken, orders)
	} else {
		fmt.Fprintf(stderr, "  %-32s %d/%d orders\n", title, taken, orders)
	}
	if firstErr != nil {
		return exitf(exitFailure, "%v", firstErr)
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
