package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WaitStopped returns once every thread of process pid is stopped (state T in
// /proc/pid/task/*/stat), or an error after bound. kill(SIGSTOP) returns before the signal has
// reached each thread: a thread busy on another core runs on until it next enters the kernel,
// and a JVM's request thread may answer a request sent after the kill. A Pause that returns
// before that would let a test's "the server is silent" race the scheduler.
func WaitStopped(pid int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: %d threads of process %d still running %v after SIGSTOP", running, pid, bound)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid not in a stopped state. A thread that exits
// between the listing and the read is not counted.
func runningThreads(pid int) (int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, fmt.Errorf("testserver: process %d has no threads in /proc", pid)
	}
	running := 0
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return 0, fmt.Errorf("testserver: unreadable %s: %q", path, s)
		}
		switch s[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			running++
		}
	}
	return running, nil
}
