//go:build !linux

package main

import (
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock"
)

// command is what run starts: the program's path, its argv and its environment.
type command struct {
	path string
	argv []string
	env  []string
}

// supervise needs Linux: run holds the lock until every process of the command is gone, which
// it learns as their subreaper, and a killed run takes the command along (Pdeathsig).
func supervise(c command, _ *fencelock.Lock, _ time.Duration, _ <-chan os.Signal, _ io.Writer) outcome {
	return outcome{started: exitf(exitFailure, "run needs Linux to hold the lock for every process of %q", c.argv[0])}
}
