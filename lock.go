package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Lock is one hold of a lock. Its methods are safe for concurrent use and safe to call on a
// nil *Lock, which reports ErrNotHeld.
type Lock struct {
	c        *Client
	st       *holdState
	ctx      *lockContext // points at lctx
	lctx     lockContext  // one allocation with the Lock
	hold     string
	count    int
	ttl      time.Duration
	released atomic.Bool
}

// Name returns the lock's name.
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.st.name
}

// Token returns the fencing token: strictly greater than every token issued before for this
// name. Hand it to the store the lock protects and have the store refuse writes that carry a
// token older than one it has seen (package fence).
func (l *Lock) Token() int64 {
	if l == nil {
		return 0
	}
	return l.st.token
}

// Owner returns the owner ID the lock is held under.
func (l *Lock) Owner() string {
	if l == nil {
		return ""
	}
	return l.st.owner
}

// HoldCount returns the hold count the store reported when this hold was obtained: 1 for a
// first acquisition, more for a reentrant one.
func (l *Lock) HoldCount() int {
	if l == nil {
		return 0
	}
	return l.count
}

// Context returns a context that ends the moment the lock can no longer be trusted: lost,
// expired past its validity deadline, or released. Its Err reads the clock, so a check right
// before a write sees a deadline that passed while the process was paused. The context carries
// the values of the context given to Obtain, and re-enters this lock when given to Obtain for
// the same name.
func (l *Lock) Context() context.Context {
	if l == nil {
		return closedContext{}
	}
	return l.ctx
}

// Valid returns nil while the lock is trusted, and otherwise the reason it is not (matching
// ErrLost or ErrNotHeld). Like Context().Err(), it reads the clock.
func (l *Lock) Valid() error {
	if l == nil {
		return fmt.Errorf("%w: nil lock", ErrNotHeld)
	}
	if l.released.Load() {
		return fmt.Errorf("%w: released", ErrNotHeld)
	}
	return l.st.valid()
}

// ValidUntil returns the validity deadline: the time, on the Client's clock, after which the
// lock is considered lost unless a renewal is confirmed before then.
func (l *Lock) ValidUntil() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return l.st.deadline
}

// Refresh extends the lock by ttl (the lock's TTL when ttl is zero) in the store and moves the
// validity deadline; later watchdog renewals use the new TTL. It is how a holder with the
// watchdog off keeps the lock.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := l.Valid(); err != nil {
		return err
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	st := l.st
	st.mu.Lock()
	if ttl == 0 {
		ttl = st.ttl
	}
	st.mu.Unlock()
	s := settings{ttl: ttl, renewEvery: st.every}
	if err := s.validate(); err != nil {
		return err
	}
	sent := l.c.now()
	r := l.c.b.Renew(ctx, []Lease{{Name: st.name, Owner: st.owner, TTL: ttl}})
	if len(r) == 0 {
		return fmt.Errorf("%w: backend returned no renewal result", ErrUnavailable)
	}
	switch err := r[0].Err; {
	case err == nil:
		st.mu.Lock()
		st.ttl = ttl
		st.mu.Unlock()
		st.extend(sent, ttl, r[0].Validity)
		l.c.emit(Event{Kind: EventRenewed, Name: st.name, Token: st.token, Duration: l.c.now().Sub(sent)})
		return nil
	case errors.Is(err, ErrNotHeld):
		st.end(&lostError{reason: err}, true)
		return err
	default:
		return err
	}
}

// Release ends this hold. The watchdog has stopped renewing the lock by the time Release
// returns, and the lock's context has ended. It returns an error matching ErrNotHeld when the
// lock is nil, was released already, or expired and was taken by someone else; in that last
// case the other holder's lock is left intact.
//
// A release whose outcome is unknown (a timeout) is retried with the same hold ID, so it never
// decrements a reentrant hold count twice.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return fmt.Errorf("%w: nil lock", ErrNotHeld)
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if !l.released.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: released already", ErrNotHeld)
	}
	st := l.st
	l.ctx.cancel(releasedError{})
	st.drop(l.ctx)

	lease := Lease{Name: st.name, Owner: st.owner, TTL: l.ttl}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		_, err = l.c.b.Release(ctx, lease, l.hold)
		if err == nil || errors.Is(err, ErrInvalid) || ctx.Err() != nil {
			break
		}
		if errors.Is(err, ErrNotHeld) {
			if attempt > 0 {
				// An earlier attempt whose outcome was unknown released it.
				err = nil
			}
			break
		}
	}
	l.c.emit(Event{Kind: EventReleased, Name: st.name, Token: st.token, Duration: l.c.now().Sub(st.obtained), Err: err})
	return err
}

// lostErr returns the loss of the lock, or nil.
func (l *Lock) lostErr() error {
	if err := l.st.valid(); errors.Is(err, ErrLost) {
		return err
	}
	return nil
}

// closedContext is the context of a nil lock: ended from the start.
type closedContext struct{}

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (closedContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (closedContext) Done() <-chan struct{}       { return closedDone }
func (closedContext) Err() error                  { return releasedError{} }
func (closedContext) Value(any) any               { return nil }
