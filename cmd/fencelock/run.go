package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	maxHold      time.Duration
	minHold      time.Duration
	lockDelay    time.Duration
	permits      int // with N > 0, NAME is a semaphore of N permits and run takes one
	restart      bool
	again        bool // waiting again after a lost lock (--restart): the backend may be away
}

const runLong = `Run COMMAND while holding the lock NAME, and release the lock when it ends.

The command gets FENCELOCK_NAME and FENCELOCK_TOKEN (the fencing token) in its environment;
hand the token to the store it writes to, so that a write from a holder that lost the lock is
refused.

It also gets the lock's validity deadline, to check before each write: FENCELOCK_VALID_UNTIL,
the first one, in Unix milliseconds, and FENCELOCK_VALID_UNTIL_FILE, the path of a file that
run rewrites (whole, by rename) after each renewal with the deadline it moved to, in Unix
milliseconds, and sets to 0 once the lock is lost. A command that reads the file before each
write, and writes only while its own clock is before that deadline, writes nothing past it
even when run is paused or cut off from the store and cannot end it in time: the file then
keeps the last deadline, which passes. Only a pause of the command itself between its check
and its write gets past that; only the store's check of FENCELOCK_TOKEN guards against it.
For example:
  [ "$(date +%s%3N)" -lt "$(cat "$FENCELOCK_VALID_UNTIL_FILE")" ] && write ...

run holds the lock until every process of the command is gone: the command, and whatever it
started, also in the background (run is their subreaper), not only until the command itself
exits. The lock is renewed meanwhile. If it is lost anyway (the backend deleted it, or could
not be reached for a whole TTL), those processes get SIGTERM and SIGCONT (a stopped one runs
its handler), then SIGKILL after --kill-after, and run exits 76 once they are gone.
If run itself is killed (SIGKILL), the command gets SIGKILL; what the command started in turn
goes on, holding no lock.

SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCONT sent to run are passed to the command's process
group; SIGTSTP stops the command and then run. Run from a terminal, the command's process group
is the terminal's foreground group, so that it reads the terminal and Ctrl-C and Ctrl-Z reach
it; when the command dies of Ctrl-C or Ctrl-\, run sends the signal on to its own process
group (such as the shell whose script called run), which it then dies of. When the command
stops (Ctrl-Z), run stops too and gives the terminal back; while stopped it
does not renew the lock, which expires after its TTL. When run continues, it continues the
command, or ends it as above if the lock was lost meanwhile.

With -n N, NAME is a semaphore of N permits, and run takes one of them instead of the lock:
at most N commands run at once under NAME, across every host. Each permit has its own
FENCELOCK_TOKEN. Every run of NAME must say the same N while any runs; one that says another
exits 2.

With --restart, run is a daemon under a leader election: when the lock is lost and the
command was ended, run waits for the lock again, without limit, and runs the command again
with the new FENCELOCK_TOKEN (the leader's term). It exits only when the command exits on its
own, or a signal ends it. fencelock status NAME shows who leads.

While run waits for the lock (--wait, --restart) and every attempt fails on the backend, it
says so on stderr every 5 s, and when the backend answers again.

A signal while run waits for the lock ends the wait: run exits 128+signal, as a shell does,
and the command is not started. Otherwise run exits with the command's own exit code.

Exit codes of run's own:
  75   the lock is held elsewhere, and --wait ran out (change it with --conflict-exit-code)
  76   the lock was lost while the command ran, which was ended; or it was gone when run
       released it, so the command may have overlapped another holder
  2    bad input: empty or too long NAME, no COMMAND, a TTL that is too short, a backend
       URL to fix (no scheme, a bad port, a wrong password, a database the server lacks)
  125  fencelock failed: the backend cannot be reached or refuses to lock, also when --wait
       ran out; or the release after a successful command failed (the lock expires after
       its TTL)
  126  COMMAND is not executable
  127  COMMAND was not found
  128+n  a signal n ended the wait for the lock`

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding a cluster-wide lock",
		Long:  runLong,
		Example: `  # The nightly report runs on one host only; the others give up at once (cron).
  fencelock run nightly-report -- /usr/local/bin/report --date today

  # Wait up to ten minutes for the lock instead.
  fencelock run --wait 10m migrate -- ./migrate.sh

  # At most 3 hosts rebuild the index at once; the others wait their turn.
  fencelock run -n 3 --wait -1s rebuild-index -- ./rebuild.sh

  # One scheduler across the fleet: every host waits its turn, and takes over when the leader
  # is lost.
  fencelock run --wait -1s --restart scheduler -- ./scheduler

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
	cmd.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for the lock when the first attempt does not get it; 0 gives up at once, a negative value waits without limit")
	cmd.Flags().IntVar(&f.conflictCode, "conflict-exit-code", exitConflict, "exit code when the lock is held elsewhere")
	cmd.Flags().BoolVar(&f.restart, "restart", false, "after a lost lock, wait for it again without limit and run the command again (a daemon under a leader election)")
	cmd.Flags().IntVarP(&f.permits, "permits", "n", 0, "take one of N permits of the semaphore NAME instead of the lock NAME (Redis, etcd, ZooKeeper)")
	cmd.Flags().DurationVar(&f.lockDelay, "lock-delay", 0, "when run loses the lock without releasing it (paused, cut off), keep it from others this much longer than run trusted it (Redis and Redlock only); 0 for none")
	cmd.Flags().DurationVar(&f.minHold, "min-hold", 0, "keep the lock at least this long after it was obtained, however soon the command ends (cron on hosts whose clocks differ does not run the job twice); 0 for none")
	cmd.Flags().DurationVar(&f.maxHold, "max-hold", 0, "end the command as a lost lock does once it has held the lock this long (a hung job lets go); 0 for no cap")
	cmd.Flags().DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after a lost lock, SIGKILL the command this long after SIGTERM; 0 never sends SIGKILL")
	return cmd
}

// lossReason is why a lock was lost, one line, without the library's "fencelock: lock lost: ",
// which the command's own message around it says already.
func lossReason(err error) string { return strings.TrimPrefix(errorLine(err), "lock lost: ") }

// checkTTL is the one wording of a TTL below the minimum, for run and doctor alike.
func checkTTL(ttl time.Duration) error {
	if ttl < fencelock.MinTTL {
		return exitf(exitUsage, "--ttl %v is shorter than the minimum %v a lock accepts", ttl, fencelock.MinTTL)
	}
	return nil
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

// passedSignals are the signals run passes to the command; before the command starts, they end
// the wait for the lock.
var passedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func run(ctx context.Context, g *globals, f *runFlags, name string, argv []string, cmd *cobra.Command) error {
	if err := checkName(name); err != nil {
		return err
	}
	if f.conflictCode < 0 || f.conflictCode > 255 {
		return exitf(exitUsage, "--conflict-exit-code %d is not an exit code (0-255)", f.conflictCode)
	}
	if err := checkTTL(f.ttl); err != nil {
		return err
	}
	if f.maxHold < 0 {
		return exitf(exitUsage, "--max-hold %v is negative: give how long the command may hold the lock, or 0 for no cap", f.maxHold)
	}
	if f.lockDelay < 0 {
		return exitf(exitUsage, "--lock-delay %v is negative: give how long a lost lock stays taken after run stops trusting it, or 0 for none", f.lockDelay)
	}
	if f.minHold < 0 {
		return exitf(exitUsage, "--min-hold %v is negative: give how long the lock stays held at least, or 0 for none", f.minHold)
	}
	if f.maxHold > 0 && f.minHold > f.maxHold {
		return exitf(exitUsage, "--min-hold %v is longer than --max-hold %v", f.minHold, f.maxHold)
	}
	if f.killAfter < 0 {
		return exitf(exitUsage, "--kill-after %v is negative: give how long after SIGTERM to send SIGKILL, or 0 for never", f.killAfter)
	}
	if cmd.Flags().Changed("permits") && f.permits < 1 {
		return exitf(exitUsage, "-n %d: a semaphore needs at least 1 permit", f.permits)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitf(exitNotFound, "command %q not found", argv[0])
		}
		return exitf(exitNoExec, "command %q cannot be run: %v", argv[0], err)
	}

	// From here on run answers signals itself, not through ctx: a signal ends the wait with
	// 128+signal, and once the command runs it is passed on.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, passedSignals...)
	defer signal.Stop(sigs)
	ctx = context.WithoutCancel(ctx)

	st, err := openStore(g.backendURL())
	if err != nil {
		return err
	}
	defer st.close()
	valid, err := newValidityFile()
	if err != nil {
		return err
	}
	defer valid.remove()
	reach := &reachReport{w: cmd.ErrOrStderr(), name: name}
	locker := st.client(fencelock.WithObserver(func(e fencelock.Event) {
		valid.observe(e)
		reach.observe(e)
	}))
	defer locker.Close()
	for {
		lock, err := obtainForRun(ctx, st, locker, f, name, argv[0], sigs)
		if err != nil {
			return err
		}
		keeping, err := valid.keep(lock)
		if err != nil {
			return finish(lock, name, outcome{started: err})
		}
		env := append(os.Environ(), "FENCELOCK_NAME="+name, "FENCELOCK_TOKEN="+strconv.FormatInt(lock.Token(), 10),
			"FENCELOCK_VALID_UNTIL="+strconv.FormatInt(lock.ValidUntil().UnixMilli(), 10), "FENCELOCK_VALID_UNTIL_FILE="+valid.path)
		out := supervise(command{path: path, argv: argv, env: env}, lock, f.killAfter, sigs, cmd.ErrOrStderr())
		keeping()
		err = finish(lock, name, out)
		if f.restart && out.started == nil && out.lost != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "fencelock: %s; waiting for the lock again (--restart)\n", errorLine(err))
			again := *f
			again.wait, again.again = -1, true
			f = &again
			continue
		}
		valid.remove() // ranCommand may end run by a signal, past the deferred calls
		return ranCommand(out, err)
	}
}

// ranCommand is run's exit after the command ran: err, or, when the command died of Ctrl-C or
// Ctrl-\ with the terminal, the same signal for run's own process group.
func ranCommand(out outcome, err error) error {
	var ex *exitError
	if out.foreground && errors.As(err, &ex) && ex.err == nil && isInterrupt(out.status) {
		// Ctrl-C reached the command alone, which had the terminal; without run in between it
		// would have reached run's process group too, such as the shell whose script runs run,
		// which stops the script only when it gets the signal itself.
		dieOf(out.status.Signal())
	}
	return err
}

// isInterrupt reports whether the command died of a signal from the keyboard (Ctrl-C, Ctrl-\).
func isInterrupt(ws syscall.WaitStatus) bool {
	return ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGQUIT)
}

// dieOf sends sig to run's own process group, run included, which it ends as the signal's
// default action does.
func dieOf(sig syscall.Signal) {
	signal.Reset(sig)
	_ = syscall.Kill(0, sig)
	time.Sleep(time.Second) // the signal ends the process before this returns
}

// outcome is how the command's processes ended.
type outcome struct {
	started error              // the command could not be started
	status  syscall.WaitStatus // the command's own exit status
	lost    error              // the lock was lost while the processes ran
	// foreground says that the command's group had the terminal at the end, so that the
	// terminal's keyboard signals reached it rather than run.
	foreground bool
}

// finish releases the lock and turns the outcome into run's exit.
func finish(lock *fencelock.Lock, name string, out outcome) error {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rerr := lock.Release(rctx)
	switch {
	case out.started != nil:
		return out.started
	case out.lost != nil:
		return &exitError{code: exitLost, err: fmt.Errorf("lock %q was lost while the command ran (%s); the command was ended", name, lossReason(out.lost))}
	case rerr == nil:
		return statusExit(out.status)
	case errors.Is(rerr, fencelock.ErrNotHeld), errors.Is(rerr, fencelock.ErrLost):
		// Expired or removed before the release, unnoticed: the command's last stretch may have
		// overlapped another holder's.
		return &exitError{code: exitLost, err: fmt.Errorf("lock %q was not held when the command ended (%v); the command may have overlapped another holder", name, rerr)}
	}
	msg := fmt.Errorf("releasing lock %q after the command ended: %v; it expires after its TTL", name, rerr)
	if code := statusCode(out.status); code != 0 {
		return &exitError{code: code, err: msg}
	}
	return &exitError{code: exitFailure, err: msg}
}

// holderMeta is what run publishes about itself, for fencelock status: host, process, command
// and start time.
func holderMeta(command string) string {
	host, _ := os.Hostname()
	b, _ := json.Marshal(holderInfo{host, os.Getpid(), filepath.Base(command), time.Now().UTC().Format(time.RFC3339)})
	return string(b)
}

// holderInfo is what run publishes about itself as the lock's metadata.
type holderInfo struct {
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Since   string `json:"since"`
}

// statusCode is run's exit code for the command's exit status: its code, or 128+signal as a
// shell reports it.
func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func statusExit(ws syscall.WaitStatus) error {
	if code := statusCode(ws); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// reachReport tells run's stderr that the backend stays out of reach while run waits for the
// lock, and when it answers again, so that a wait through an outage (--wait, --restart) is not
// silent. The first failed attempt of a wait goes unsaid: run's own exit says it when run does
// not wait, and a wait that gets through within fencelock.UnavailableEvery needs no word.
type reachReport struct {
	w    io.Writer
	name string
	mu   sync.Mutex
	said bool // it said the backend is out of reach, and has not said it answers again
}

func (r *reachReport) observe(e fencelock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case e.Kind == fencelock.EventUnavailable && e.Duration > 0:
		fmt.Fprintf(r.w, "fencelock: lock %q: every attempt for %v failed on the backend (%s); still trying\n", r.name, e.Duration.Round(time.Second), errorLine(e.Err))
		r.said = true
	case e.Kind == fencelock.EventAvailable && r.said:
		fmt.Fprintf(r.w, "fencelock: lock %q: the backend answers again, after %v\n", r.name, e.Duration.Round(time.Second))
		r.said = false
	}
}
