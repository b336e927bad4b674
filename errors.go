package fencelock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/driver"
)

// The errors of this package, named by concept. They are package driver's, which backends
// return; backends wrap them with %w to add detail, so compare with errors.Is, never with ==.
var (
	// ErrNotObtained means the lock is held by someone else: TryObtain found it held, or Obtain
	// gave up waiting. When Obtain gives up because its context ended, the error also matches
	// the context's error.
	ErrNotObtained = driver.ErrNotObtained

	// ErrNotHeld means the caller does not hold the lock: it was released already, expired and
	// was taken by another holder, or never obtained.
	ErrNotHeld = driver.ErrNotHeld

	// ErrLost means a held lock can no longer be trusted: its key vanished or changed owner, or
	// its validity deadline passed without a confirmed renewal. The lock's context ends with an
	// error that matches both ErrLost and context.Canceled.
	ErrLost = driver.ErrLost

	// ErrInvalid means an argument or the state of the store is unusable: an empty name, a
	// non-positive TTL, a nil client, a key that holds data fencelock did not write.
	ErrInvalid = driver.ErrInvalid

	// ErrUnavailable means the backend could not be reached or refused to act for a reason that
	// may pass: a network error, a timeout, a read-only replica during a failover.
	ErrUnavailable = driver.ErrUnavailable

	// ErrClosed means the Client was closed.
	ErrClosed = driver.ErrClosed

	// ErrUpgrade means a holder asked, under its own hold, for more than it holds: a write lock
	// while it holds a read lock of the same RWLock, or more permits of a semaphore than its
	// permit takes. It is refused at once, never waited for: two readers that both waited to
	// upgrade would wait for each other forever. It matches ErrInvalid.
	ErrUpgrade = driver.ErrUpgrade

	// ErrMaxHold means a lock was held for as long as WithMaxHold allows. The lock's context
	// ends with an error that matches it, ErrLost and context.Canceled.
	ErrMaxHold = errors.New("fencelock: held for the longest WithMaxHold allows")
)

// HeldError is returned when another owner holds the lock (a backend's Acquire returns it; see
// driver.HeldError). It matches ErrNotObtained.
type HeldError = driver.HeldError

// LimitError is returned when a semaphore is asked for with a limit other than the one its
// current holders agreed on (see driver.LimitError). It matches ErrInvalid.
type LimitError = driver.LimitError

// errDeadlinePassed is the cause of a lock lost to its validity deadline.
var errDeadlinePassed = errors.New("validity deadline passed")

// lostError is the error of a lost lock's context: it matches ErrLost and context.Canceled,
// so that code which only knows about contexts still stops.
type lostError struct{ reason error }

func (e *lostError) Error() string {
	if e.reason == nil {
		return ErrLost.Error()
	}
	// A reason of the package's own carries the package prefix already: say it once.
	return "fencelock: lock lost: " + strings.TrimPrefix(e.reason.Error(), "fencelock: ")
}

func (e *lostError) Is(target error) bool { return target == ErrLost || target == context.Canceled }
func (e *lostError) Unwrap() error        { return e.reason }

// releasedError is the error of a released lock's context.
type releasedError struct{}

func (releasedError) Error() string { return "fencelock: lock released" }
func (releasedError) Is(target error) bool {
	return target == context.Canceled || target == ErrNotHeld
}

// bothError is two errors as one, on one line ("first: second"), matching both: an Obtain that
// gave up because its context ended is not obtained, and ended by that context.
// errors.Join would put them on two lines, which line-based logs split apart.
type bothError struct{ first, second error }

func (e *bothError) Error() string   { return e.first.Error() + ": " + e.second.Error() }
func (e *bothError) Unwrap() []error { return []error{e.first, e.second} }

// notObtainedBy is the error of an acquisition given up because ctx ended: it matches
// ErrNotObtained, err and the context's cause, and says each once.
func notObtainedBy(err error, ctx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		err = ErrNotObtained
	case !errors.Is(err, ErrNotObtained):
		err = fmt.Errorf("%w: %w", ErrNotObtained, err)
	}
	if cause == nil || errors.Is(err, cause) {
		return err
	}
	return &bothError{err, cause}
}

// errNoSemaphores is the error of a semaphore, or a permit's Verify, on a backend without them.
var errNoSemaphores = invalidf("this backend keeps no semaphores (Redis, etcd and ZooKeeper do; it does not implement driver.Semaphores)")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// errNoPublish is the error of Leadership.Proclaim on a backend that cannot change a held
// lock's metadata. It matches ErrInvalid and errors.ErrUnsupported.
var errNoPublish = fmt.Errorf("%w: %w: this backend cannot change a held lock's published value (Redis, etcd, ZooKeeper and memorybackend can; it does not implement driver.Publisher)", ErrInvalid, errors.ErrUnsupported)

// errNoLine is the error of Election.Candidates on a backend that cannot list its line. It
// matches ErrInvalid and errors.ErrUnsupported.
var errNoLine = fmt.Errorf("%w: %w: this backend cannot list the contenders waiting in line (Redis, etcd, ZooKeeper and memorybackend can; it does not implement driver.LineLister)", ErrInvalid, errors.ErrUnsupported)
