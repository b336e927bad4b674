package main

import "fmt"

// Exit codes of fencelock's own, documented in `fencelock run --help` and the README. run
// passes its child's exit code through otherwise.
const (
	exitOK       = 0
	exitFinding  = 1   // doctor: a finding that breaks safety
	exitUsage    = 2   // bad command line or input
	exitConflict = 75  // the lock is held elsewhere (EX_TEMPFAIL; run --conflict-exit-code)
	exitLost     = 76  // the lock was lost while the command ran
	exitFailure  = 125 // fencelock itself failed: backend unreachable, unexpected error
	exitNoExec   = 126 // the command is not executable
	exitNotFound = 127 // the command was not found
)

// exitError carries an exit code and an optional message to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}
