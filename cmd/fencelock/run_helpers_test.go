package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// forceRelease deletes the lock's key behind its holder's back, as an operator or an eviction
// would.
func forceRelease(t *testing.T, r *testserver.Redis, name string) {
	t.Helper()
	rc := r.ClientT(t)
	if err := rc.Del(context.Background(), redisbackend.New(rc).Key(name)).Err(); err != nil {
		t.Fatal(err)
	}
}

// alive reports whether pid is a process that has not exited: a zombie, which has exited but
// whose parent has not reaped it yet, counts as gone.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPID waits until the file at path holds a process ID, as a command under test writes it.
func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no process ID in %s", path)
	return 0
}

// killAtEnd SIGKILLs pid when the test ends, so that a process the test meant to see dead does
// not outlive a failed test.
func killAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
}

// lines returns the lines of the file at path; none when it does not exist.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func tempFile(t *testing.T, name string) string { return filepath.Join(t.TempDir(), name) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFile waits until the file at path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !exists(path) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
