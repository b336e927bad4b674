package main

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
)

// validityFile is FENCELOCK_VALID_UNTIL_FILE: the lock's validity deadline for the command to
// read before each write, kept current by run. run renews the lock, and a renewal moves the
// deadline; the first deadline alone, in FENCELOCK_VALID_UNTIL, would stop a long command
// early. When run cannot renew — it is paused, or cut off from the store — the file keeps the
// last deadline, which passes: a command that checks it stops writing by then, on its own
// clock, even while run cannot tell it to.
//
// The file holds the deadline in Unix milliseconds and a newline, "0" once the lock is lost;
// each write is a new file renamed over the old, so a reader never sees half of one. It lives
// in a directory of its own that run removes when it exits.
type validityFile struct {
	dir, path string
	renewed   chan struct{} // a renewal was confirmed: the deadline moved
}

func newValidityFile() (*validityFile, error) {
	dir, err := os.MkdirTemp("", "fencelock-run-")
	if err != nil {
		return nil, exitf(exitFailure, "making the directory of FENCELOCK_VALID_UNTIL_FILE: %v", err)
	}
	return &validityFile{dir: dir, path: filepath.Join(dir, "valid_until"), renewed: make(chan struct{}, 1)}, nil
}

// observe is the Client's observer: it wakes keep on each renewal. It never blocks.
func (v *validityFile) observe(e fencelock.Event) {
	if e.Kind == fencelock.EventRenewed {
		select {
		case v.renewed <- struct{}{}:
		default: // a wake is pending already; it reads the newest deadline
		}
	}
}

// keep writes lock's deadline now, again after each renewal, and "0" once the lock is lost,
// until the returned stop, which waits for it.
func (v *validityFile) keep(lock *fencelock.Lock) (stop func(), err error) {
	if err := v.write(lock.ValidUntil()); err != nil {
		return nil, err
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		lost := lock.Context().Done()
		for {
			select {
			case <-v.renewed:
				_ = v.write(lock.ValidUntil())
			case <-lost:
				_ = v.write(time.Time{})
				return
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-done }, nil
}

// write replaces the file with deadline in Unix milliseconds, or "0" for the zero time.
func (v *validityFile) write(deadline time.Time) error {
	ms := int64(0)
	if !deadline.IsZero() {
		ms = deadline.UnixMilli()
	}
	tmp := v.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(ms, 10)+"\n"), 0o644); err != nil {
		return exitf(exitFailure, "writing FENCELOCK_VALID_UNTIL_FILE: %v", err)
	}
	if err := os.Rename(tmp, v.path); err != nil {
		return exitf(exitFailure, "writing FENCELOCK_VALID_UNTIL_FILE: %v", err)
	}
	return nil
}

func (v *validityFile) remove() { _ = os.RemoveAll(v.dir) }
