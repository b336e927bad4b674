package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock"
)

func init() { commands = append(commands, newRunCmd) }

// maxNameLen bounds lock names: they become keys, paths and environment values.
const maxNameLen = 512

type runFlags struct {
	ttl          time.Duration
	wait         time.Duration
	conflictCode int
	killAfter    time.Duration
}

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding a cluster-wide lock",
		Long: `Run COMMAND while holding the lock NAME, and release the lock when it ends.

The command gets FENCELOCK_NAME and FENCELOCK_TOKEN (the fencing token) in its environment;
hand the token to the store it writes to, so that a write from a holder that lost the lock is
refused. The lock is renewed while the command runs. If it is lost anyway (the backend
deleted it, or could not be reached for a whole TTL), the command gets SIGTERM, then SIGKILL
after --kill-after, and run exits with 76. SIGINT and SIGTERM sent to run are passed to the
command. Otherwise run exits with the command's own exit code.

Exit codes of run's own:
  75   the lock is held elsewhere and --wait ran out (change it with --conflict-exit-code)
  76   the lock was lost while the command ran; the command was terminated
  2    bad input: empty or too long NAME, no COMMAND, a TTL that is too short
  125  fencelock failed: the backend cannot be reached
  126  COMMAND is not executable
  127  COMMAND was not found`,
		Example: `  # The nightly report runs on one host only; the others give up at once (cron).
  fencelock run nightly-report -- /usr/local/bin/report --date today

  # Wait up to ten minutes for the lock instead.
  fencelock run --wait 10m migrate -- ./migrate.sh

  # On etcd, with a 10s TTL.
  fencelock --backend etcd://10.0.0.5:2379 run --ttl 10s reindex -- ./reindex`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) == 0:
				return exitf(exitUsage, "run needs a lock NAME and a COMMAND after --")
			case dash < 0 || dash >= len(args):
				return exitf(exitUsage, "run needs a COMMAND after --: fencelock run NAME -- COMMAND [ARGS...]")
			case dash != 1:
				return exitf(exitUsage, "run takes one lock NAME before --, got %d", dash)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), g, f, args[0], args[1:], cmd)
		},
	}
	cmd.Flags().DurationVar(&f.ttl, "ttl", 30*time.Second, "lock TTL: how long the lock outlives this process if it dies")
	cmd.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for the lock; 0 gives up at once, a negative value waits without limit")
	cmd.Flags().IntVar(&f.conflictCode, "conflict-exit-code", exitConflict, "exit code when the lock is held elsewhere")
	cmd.Flags().DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after a lost lock, SIGKILL the command this long after SIGTERM; 0 never sends SIGKILL")
	return cmd
}

func checkName(name string) error {
	switch {
	case name == "":
		return exitf(exitUsage, "the lock name is empty")
	case len(name) > maxNameLen:
		return exitf(exitUsage, "the lock name is %d bytes long; at most %d", len(name), maxNameLen)
	}
	return nil
}

func run(ctx context.Context, g *globals, f *runFlags, name string, argv []string, cmd *cobra.Command) error {
	if err := checkName(name); err != nil {
		return err
	}
	if f.conflictCode < 0 || f.conflictCode > 255 {
		return exitf(exitUsage, "--conflict-exit-code %d is not an exit code (0-255)", f.conflictCode)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitf(exitNotFound, "command %q not found", argv[0])
		}
		return exitf(exitNoExec, "command %q cannot be run: %v", argv[0], err)
	}

	st, err := openStore(g.backendURL())
	if err != nil {
		return err
	}
	defer st.close()
	if err := st.ping(ctx); err != nil {
		return err
	}
	locker := fencelock.New(st.backend)
	defer locker.Close()

	// Signals that arrive while the command runs are passed on; before that they end the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	opts := []fencelock.Option{fencelock.WithTTL(f.ttl), fencelock.WithMetadata(holderMeta(argv[0]))}
	var lock *fencelock.Lock
	switch {
	case f.wait == 0:
		lock, err = locker.TryObtain(ctx, name, opts...)
	case f.wait > 0:
		lock, err = locker.Obtain(ctx, name, append(opts, fencelock.WithWaitTimeout(f.wait))...)
	default:
		lock, err = locker.Obtain(ctx, name, opts...)
	}
	switch {
	case errors.Is(err, fencelock.ErrNotObtained) && ctx.Err() == nil:
		return &exitError{code: f.conflictCode, err: fmt.Errorf("lock %q is held elsewhere", name)}
	case err != nil:
		return errorExit(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()

	child := exec.Command(path, argv[1:]...)
	child.Args[0] = argv[0]
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = append(os.Environ(), "FENCELOCK_NAME="+name, "FENCELOCK_TOKEN="+strconv.FormatInt(lock.Token(), 10))
	// Its own process group, so that a lost lock stops what the command started too.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		return exitf(exitNoExec, "starting %q: %v", argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	var lost error
	var kill <-chan time.Time
	done := lock.Context().Done()
	for {
		select {
		case err := <-exited:
			if lost != nil {
				return &exitError{code: exitLost, err: fmt.Errorf("lock %q was lost while the command ran (%v); the command was terminated", name, lost)}
			}
			return childExit(err)
		case s := <-sigs:
			_ = syscall.Kill(-child.Process.Pid, s.(syscall.Signal))
		case <-done:
			done = nil
			lost = lock.Context().Err()
			fmt.Fprintf(cmd.ErrOrStderr(), "fencelock: lock %q lost: %v; sending SIGTERM to the command\n", name, lost)
			_ = syscall.Kill(-child.Process.Pid, syscall.SIGTERM)
			if f.killAfter > 0 {
				kill = time.After(f.killAfter)
			}
		case <-kill:
			_ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
		}
	}
}

// holderMeta is what run publishes about itself, for fencelock status: host, process, command
// and start time.
func holderMeta(command string) string {
	host, _ := os.Hostname()
	b, _ := json.Marshal(struct {
		Host    string `json:"host"`
		PID     int    `json:"pid"`
		Command string `json:"command"`
		Since   string `json:"since"`
	}{host, os.Getpid(), filepath.Base(command), time.Now().UTC().Format(time.RFC3339)})
	return string(b)
}

// childExit turns the command's end into run's exit: its code, or 128+signal as a shell does.
func childExit(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return exitf(exitFailure, "waiting for the command: %v", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &exitError{code: 128 + int(ws.Signal())}
	}
	return &exitError{code: ee.ExitCode()}
}
