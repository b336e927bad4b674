package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyProcess is a process running on a pseudo-terminal of its own, as in a terminal window.
type ptyProcess struct {
	cmd  *exec.Cmd
	ptmx *os.File
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

// startTerminal starts argv as the session leader of a new pseudo-terminal, which becomes its
// controlling ptyProcess.
func startTerminal(t *testing.T, env []string, argv ...string) *ptyProcess {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	tm := &ptyProcess{cmd: cmd, ptmx: ptmx, done: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(tm.done)
	}()
	t.Cleanup(func() {
		// The session's processes get SIGHUP when its leader dies; kill the leader's group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-tm.done
		ptmx.Close()
	})
	return tm
}

func (tm *ptyProcess) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

func (tm *ptyProcess) send(t *testing.T, s string) {
	t.Helper()
	if _, err := tm.ptmx.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// expect waits until the ptyProcess has shown want, after the first skip bytes of its output.
func (tm *ptyProcess) expect(t *testing.T, skip int, want string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := tm.output()
		if i := strings.Index(out[min(skip, len(out)):], want); i >= 0 {
			return skip + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ptyProcess never showed %q; it shows:\n%s", want, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run from a ptyProcess, a command that reads the ptyProcess gets its input: its process group is
// the ptyProcess's foreground group while it runs.
func TestRunTerminalInput(t *testing.T) {
	r, env := redisEnv(t)
	tm := startTerminal(t, env, binary, "run", "tty-read", "--", "sh", "-c", "read line; echo got:$line")
	waitHeld(t, r, "tty-read")
	tm.send(t, "hello\n")
	select {
	case <-tm.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not end 10s after the command's input was typed; the ptyProcess shows %q", tm.output())
	}
	if code := tm.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(tm.output(), "got:hello") {
		t.Fatalf("exit %d; the ptyProcess shows %q", code, tm.output())
	}
	if held(t, r, "tty-read") {
		t.Fatal("lock still held after run ended")
	}
}

// Ctrl-Z in an interactive shell stops the command along with run, and the shell gets the
// ptyProcess back. While they are stopped the lock is not renewed; it expires and another holder
// runs; fg resumes run, which finds the lock lost and ends the command before it writes again.
func TestRunTerminalSuspend(t *testing.T) {
	r, env := redisEnv(t)
	dir := t.TempDir()
	tm := startTerminal(t, append(env, "PS1=$ ", "TERM=dumb"), "bash", "--norc", "--noprofile", "-i")
	at := tm.expect(t, 0, "$ ")
	// The command is bash, not sh: dash starts commands with vfork, and a Ctrl-Z that stops
	// the vforked child before its exec leaves dash waiting for it, unstoppable, so the job
	// never stops (in a terminal without run too).
	tm.send(t, fmt.Sprintf("%s run --ttl 1s suspended -- bash -c 'while :; do date +%%s%%N >> %s/first; sleep 0.02; done'\n", binary, dir))
	waitHeld(t, r, "suspended")
	waitFile(t, dir+"/first") // the command runs
	tm.send(t, "\x1a")        // Ctrl-Z
	at = tm.expect(t, at, "Stopped")
	at = tm.expect(t, at, "$ ")
	n := len(lines(t, dir+"/first"))
	time.Sleep(300 * time.Millisecond)
	if m := len(lines(t, dir+"/first")); m != n {
		t.Fatalf("the command wrote %d times in the 300 ms after Ctrl-Z stopped its job", m-n)
	}

	// The lock expires while run is stopped; another holder takes it.
	res := cli(t, 30*time.Second, env, "run", "--wait", "20s", "suspended", "--", "sh", "-c", "date +%s%N > "+dir+"/second")
	if res.code != 0 {
		t.Fatalf("second run exited %d: %s", res.code, res.stderr)
	}
	tm.send(t, "fg\n")
	at = tm.expect(t, at, "lost")
	tm.send(t, "echo code=$?\n")
	tm.expect(t, at, fmt.Sprintf("code=%d", exitLost))
	second, _ := strconv.ParseInt(lines(t, dir+"/second")[0], 10, 64)
	for _, s := range lines(t, dir+"/first") {
		if v, _ := strconv.ParseInt(s, 10, 64); v > second {
			t.Fatalf("the first command wrote at %d, after the second holder's write at %d", v, second)
		}
	}
}

// Ctrl-C reaches the command, which has the terminal; run then dies of SIGINT too, so that a
// shell script that called it stops as it would without run in between.
func TestRunTerminalInterruptStopsScript(t *testing.T) {
	r, env := redisEnv(t)
	marker := tempFile(t, "running")
	script := fmt.Sprintf(`for i in 1 2; do %s run ctrl-c -- sh -c 'touch %s; exec sleep 30'; echo "next $i"; done; echo done`, binary, marker)
	tm := startTerminal(t, env, "bash", "-c", script)
	waitHeld(t, r, "ctrl-c")
	waitFile(t, marker)
	tm.send(t, "\x03") // Ctrl-C
	select {
	case <-tm.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the script went on after Ctrl-C; the terminal shows %q", tm.output())
	}
	if out := tm.output(); strings.Contains(out, "next") || strings.Contains(out, "done") {
		t.Fatalf("the script went on after Ctrl-C; the terminal shows %q", out)
	}
	if held(t, r, "ctrl-c") {
		t.Fatal("lock still held after Ctrl-C")
	}
}
