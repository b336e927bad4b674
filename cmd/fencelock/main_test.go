package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// binary is the fencelock command built for the tests, driven as a user would drive it.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencelock-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fencelock")
	if out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fencelock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// noTerminal starts the binary in a session of its own, without a controlling terminal: run
// takes part in the job control of a terminal it has, and the tests' terminal, when they run in
// one, is not theirs to take.
func noTerminal() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// result is what one run of the binary produced.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the binary with args and the given extra environment, bounded by timeout.
func cli(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = noTerminal()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("fencelock %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("fencelock %v did not finish within %v; stderr:\n%s", args, timeout, r.stderr)
	}
	return r
}
