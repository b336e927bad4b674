// Package testmain is the TestMain of fencelock's test packages: it starts the servers a
// package's tests share, runs the tests, stops the servers, and fails a run that passed but
// left goroutines behind.
package testmain

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Spawners ignores the goroutines that start server processes for the test harnesses
// (internal/testserver, zkbackend/zktest). Each keeps its OS thread for the life of the test
// binary: Linux sends a child its parent-death signal when the thread that forked it exits,
// so the servers die with the binary only if that thread never does.
var Spawners = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/fencelock/fencelock/internal/testserver.spawn.func1.1"),
	goleak.IgnoreTopFunction("github.com/fencelock/fencelock/zkbackend/zktest.spawn.func1.1"),
}

// leakWait is how long a passing run waits for its goroutines to end before it calls them
// leaked, longer than goleak waits by itself: a Redis backend's loss watch ends 2 s after its
// last watch, and a connection closed by the last test may still be winding down.
const leakWait = 4 * time.Second

// Run starts what the tests share (start, which may be nil), runs m's tests, stops it, and
// exits: with 1 when start fails, with the tests' code when they fail, and with 1 when they
// passed but left goroutines behind that neither Spawners nor ignore names.
func Run(m *testing.M, start func() (stop func(), err error), ignore ...goleak.Option) {
	stop := func() {}
	if start != nil {
		var err error
		if stop, err = start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := findLeaks(ignore); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func findLeaks(ignore []goleak.Option) error {
	deadline := time.Now().Add(leakWait)
	opts := append(append([]goleak.Option(nil), Spawners...), ignore...)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
