package driver

import (
	"errors"
	"fmt"
	"time"
)

// The errors a backend returns, named by concept; package fencelock gives them to its users
// under the same names. Wrap them with %w to add detail; compare with errors.Is, never with ==.
var (
	// ErrNotObtained means the lock is held by someone else: TryObtain found it held, or Obtain
	// gave up waiting. When Obtain gives up because its context ended, the error also matches
	// the context's error.
	ErrNotObtained = errors.New("fencelock: not obtained")

	// ErrNotHeld means the caller does not hold the lock: it was released already, expired and
	// was taken by another holder, or never obtained.
	ErrNotHeld = errors.New("fencelock: not held")

	// ErrLost means a held lock can no longer be trusted: its key vanished or changed owner, or
	// its validity deadline passed without a confirmed renewal. The lock's context ends with an
	// error that matches both ErrLost and context.Canceled.
	ErrLost = errors.New("fencelock: lock lost")

	// ErrInvalid means an argument or the state of the store is unusable: an empty name, a
	// non-positive TTL, a nil client, a key that holds data fencelock did not write.
	ErrInvalid = errors.New("fencelock: invalid argument")

	// ErrUnavailable means the backend could not be reached or refused to act for a reason that
	// may pass: a network error, a timeout, a read-only replica during a failover.
	ErrUnavailable = errors.New("fencelock: backend unavailable")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("fencelock: client closed")

	// ErrUpgrade means a holder asked, under its own hold, for more than it holds: a write lock
	// while it holds a read lock of the same RWLock, or more permits of a semaphore than its
	// permit takes. It is refused at once, never waited for: two readers that both waited to
	// upgrade would wait for each other forever. It matches ErrInvalid.
	ErrUpgrade = fmt.Errorf("%w: no upgrade: a holder may not take more under its hold than it holds", ErrInvalid)
)

// HeldError is returned by a backend's Acquire when another owner holds the lock. It matches
// ErrNotObtained.
type HeldError struct {
	Name string
	// Remaining is the holder's remaining time to live as the backend reported it, or zero when
	// the backend cannot tell. A waiter sleeps at most this long before its next attempt. For
	// a semaphore, it is the time until the first permit held expires.
	Remaining time.Duration
	// Limit is the semaphore's limit when Name is a semaphore whose permits are all held (or
	// promised to waiters ahead in line); zero for a lock.
	Limit int
}

func (e *HeldError) Error() string {
	if e.Limit > 0 {
		if e.Remaining > 0 {
			return fmt.Sprintf("fencelock: not obtained: all %d permits of semaphore %q are held, the first for %v more", e.Limit, e.Name, e.Remaining)
		}
		return fmt.Sprintf("fencelock: not obtained: all %d permits of semaphore %q are held or promised to waiters ahead", e.Limit, e.Name)
	}
	if e.Remaining > 0 {
		return fmt.Sprintf("fencelock: not obtained: %q is held by another owner for %v more", e.Name, e.Remaining)
	}
	return fmt.Sprintf("fencelock: not obtained: %q is held by another owner", e.Name)
}

// Is reports whether target is ErrNotObtained.
func (e *HeldError) Is(target error) bool { return target == ErrNotObtained }

// LimitError is returned when a semaphore is asked for with a limit other than the one its
// current holders agreed on: contenders that disagree on the limit would otherwise let more
// holders in than some of them allow. It matches ErrInvalid.
type LimitError struct {
	Name          string
	Limit, Stored int // what the call asked for, and what the holders agreed on
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("fencelock: invalid argument: semaphore %q has limit %d while its permits are held; this call asked for %d", e.Name, e.Stored, e.Limit)
}

// Is reports whether target is ErrInvalid.
func (e *LimitError) Is(target error) bool { return target == ErrInvalid }

// MayHold marks err, the failure of an acquisition, as one after which the store may hold the
// request's hold all the same: the Client then undoes it, releasing the hold in the
// background, as it does after any error whose outcome is unknown. Only an error that would
// otherwise say nothing was taken needs it — one matching ErrInvalid, as when the store ran
// the request and then refused a step after it. A backend never undoes an acquisition itself.
func MayHold(err error) error { return &mayHoldError{err} }

type mayHoldError struct{ err error }

func (e *mayHoldError) Error() string { return e.err.Error() }
func (e *mayHoldError) Unwrap() error { return e.err }

// StoreMayHold reports whether err was marked with MayHold.
func StoreMayHold(err error) bool {
	_, ok := errors.AsType[*mayHoldError](err)
	return ok
}
