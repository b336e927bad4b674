package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Lock is one hold of a lock. Its methods are safe for concurrent use and safe to call on a
// nil *Lock, which reports ErrNotHeld. The holds one owner has of one lock share a validity
// deadline and a renewal, and are lost together.
type Lock struct {
	c        *Client
	h        *hold
	lctx     lockContext
	hold     string
	count    int
	released atomic.Bool
}

// Name returns the lock's name.
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.h.name
}

// Token returns the fencing token: strictly greater than every token issued before for this
// name. Hand it to the store the lock protects and have the store refuse writes that carry a
// token older than one it has seen (package fence). A Client made WithTokenBase adds its base.
func (l *Lock) Token() int64 {
	if l == nil {
		return 0
	}
	return l.h.token + l.c.tokenBase
}

// StoreToken returns the token as the store issued it, without the Client's token base
// (WithTokenBase): for a backend's own guards, which compare it with what the store keeps
// (etcdbackend's Guard). Hand Token, not this, to a fenced store.
func (l *Lock) StoreToken() int64 {
	if l == nil {
		return 0
	}
	return l.h.token
}

// Owner returns the owner ID the lock is held under.
func (l *Lock) Owner() string {
	if l == nil {
		return ""
	}
	return l.h.owner
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
// expired past its validity deadline, or released; context.Cause says which. Its Err reads the
// clock, so a check right before a write sees a deadline that passed while the process was
// paused, and Done closes by itself when the deadline passes. The context carries the values
// of the context given to Obtain, and re-enters this lock when given to Obtain for the same
// name.
func (l *Lock) Context() context.Context {
	if l == nil {
		return closedContext{}
	}
	return &l.lctx
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
	return l.h.valid()
}

// ValidUntil returns the validity deadline: the time, on the Client's clock, after which the
// lock is considered lost unless a renewal is confirmed before then.
func (l *Lock) ValidUntil() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.h.validUntil()
}

// Verify asks the store, in one round trip, whether it still holds this lock for this holder:
// the lock's owner with the lock's token (for a permit, that owner's permit with its token).
// It returns nil when it does; an error matching ErrLost and ErrNotHeld when the store says
// otherwise, and the lock is then lost (its context ends with that error); the lock's own
// error when it is no longer valid here, without asking; and the backend's error (matching
// ErrUnavailable, or ctx's) when the store did not answer, the lock staying as it was.
//
// What it guarantees: at the moment the store answered, the lock was this holder's. Nothing
// after: a pause between Verify and the write lets the lock pass to another as much as one
// between Valid and the write does, and only the store's check of the token (package fence)
// closes that window. Verify catches what Valid cannot: a lock the store lost or gave away
// while this process still trusted it, as after a failover, an eviction or a key deleted by
// hand. The read is the backend's Inspect: a majority's on Redlock, linearizable on etcd, and
// on ZooKeeper the connected server's, which may lag the leader by its replication.
func (l *Lock) Verify(ctx context.Context) error {
	if err := l.Valid(); err != nil {
		return err
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	h := l.h
	var info Info
	if h.limit > 0 {
		sb, ok := l.c.b.(driver.Semaphores)
		if !ok {
			return errNoSemaphores
		}
		si, err := sb.InspectSemaphore(ctx, h.name)
		if err != nil {
			return err
		}
		for _, p := range si.Permits {
			if p.Owner == h.owner {
				info = p
				info.Held = true
			}
		}
	} else {
		var err error
		if info, err = l.c.b.Inspect(ctx, h.name); err != nil {
			return err
		}
	}
	switch {
	case info.Held && info.Owner == h.owner && info.Token == h.token:
		return l.Valid() // the round trip may have taken what validity was left
	case !info.Held || info.Owner != h.owner:
		h.lose(fmt.Errorf("%w: the store says %q is not this holder's", ErrNotHeld, h.name))
	default:
		h.lose(fmt.Errorf("%w: the store holds %q for this owner with token %d, not this lock's %d", ErrNotHeld, h.name, info.Token, h.token))
	}
	if l.released.Load() {
		return fmt.Errorf("%w: released", ErrNotHeld)
	}
	return h.err()
}

// Refresh sets the lock's TTL in the store to ttl (the lock's current TTL when ttl is zero),
// shorter or longer than before, and the validity deadline to ttl from when the refresh was
// sent; later watchdog renewals use the new TTL. It is how a holder with the watchdog off keeps
// the lock. A watchdog renewal on its way is waited for first, within ctx, so that it cannot
// undo the refresh. Refresh returns by ctx's deadline. The store may set ttl as soon as it
// receives the request, so from the send on the deadline is ttl from the send if that is
// earlier: while the answer is on its way, and after an unknown outcome (an error that does
// not match ErrNotHeld) until a renewal is confirmed.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := l.Valid(); err != nil {
		return err
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	h := l.h
	lease := h.lease()
	if ttl == 0 {
		ttl = lease.TTL - h.delay
	}
	s := settings{ttl: ttl, renewEvery: h.fixedEvery, lockDelay: h.delay}
	if err := s.validate(); err != nil {
		return err
	}
	lease.TTL, lease.Refresh = ttl+h.delay, true
	mine := make(chan struct{})
	defer close(mine)
	for !h.claim(mine) {
		busy, cause := h.busy()
		if cause != nil {
			return cause
		}
		if busy == nil {
			continue // it ended between the claim and the look
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the renewal on its way: %w", ErrUnavailable, context.Cause(ctx))
		}
	}
	defer h.unclaim(mine)
	// The holds this Client has, counted now that no release of its own can pass the Refresh
	// (a Release waits for the renewal on its way): counted before, they may include one whose
	// release reaches the store first, and the store would take another Client's hold under
	// the same owner for this one's, and cut that Client's lock short.
	lease.Holds = h.lease().Holds
	sent := l.c.now()
	// The store may set a shorter TTL the moment the request arrives, whatever becomes of the
	// answer: from the send on, the lock is trusted no longer than that.
	renewAt, moved := h.mayHaveShortened(sent, ttl)
	r := l.c.b.Renew(ctx, []driver.Lease{lease})
	if len(r) == 0 {
		return fmt.Errorf("%w: backend returned no renewal result", ErrUnavailable)
	}
	switch err := r[0].Err; {
	case err == nil:
		renewAt, ok := h.renewed(sent, ttl, r[0].Validity, true)
		if !ok {
			return h.err()
		}
		l.c.dog.rescheduled(h, renewAt)
		l.c.emit(Event{Kind: EventRenewed, Name: h.name, Token: h.token, Duration: l.c.now().Sub(sent), Owner: h.owner, Context: ctx})
		return nil
	case errors.Is(err, ErrNotHeld):
		l.c.emit(Event{Kind: EventRenewFailed, Name: h.name, Token: h.token, Duration: l.c.now().Sub(sent), Err: err, Owner: h.owner, Context: ctx})
		h.lose(err)
		return err
	default:
		l.c.emit(Event{Kind: EventRenewFailed, Name: h.name, Token: h.token, Duration: l.c.now().Sub(sent), Err: err, Owner: h.owner, Context: ctx})
		if moved {
			l.c.dog.rescheduled(h, renewAt)
		}
		return err
	}
}

// Release ends this hold. The watchdog has stopped renewing the lock by the time Release
// returns (when ctx let it wait for a renewal on its way), and the lock's context has ended.
// It returns an error matching ErrNotHeld when the lock is nil, was released already, or
// expired and was taken by someone else; in that last case the other holder's lock is left
// intact.
//
// A release whose outcome is unknown (a timeout) is tried again with the same hold ID, so it
// never decrements a reentrant hold count twice; when ctx ends before one is confirmed, Release
// returns the error and the Client goes on trying in the background (see WithCleanupTimeout).
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
	h := l.h
	renewing, lost, settled, floor := h.drop(&l.lctx)
	if settled {
		// The Client ends this hold in the store itself, undoing it or keeping it for its
		// minimum hold: another release here could end the lock that keeps.
		err := fmt.Errorf("%w: %w", ErrNotHeld, h.err())
		l.c.emit(Event{Kind: EventReleased, Name: h.name, Token: h.token, Duration: l.c.now().Sub(h.obtained), Err: err, Owner: h.owner, Context: ctx, Lost: lost})
		return err
	}
	if renewing != nil {
		select {
		case <-renewing:
		case <-ctx.Done():
			// A Refresh on its way counted this hold among the Client's: a release that reached
			// the store first would let it take another Client's hold under the same owner for
			// this one's, and cut that Client's lock short. The release follows the renewal, in
			// the background.
			err := fmt.Errorf("%w: the release waits, in the background, for the renewal on its way: %w", ErrUnavailable, context.Cause(ctx))
			lease := h.lease()
			lease.Holds = 1 // this hold's, as a last handle's release counts it (releaseAtFloor)
			l.c.letGo(renewing, lease, l.hold, floor)
			l.c.emit(Event{Kind: EventReleased, Name: h.name, Token: h.token, Duration: l.c.now().Sub(h.obtained), Err: err, Owner: h.owner, Context: ctx, Lost: lost})
			return err
		}
	}
	sent := l.c.now()
	var clean bool
	var err error
	if sent.Before(floor) {
		err = l.c.releaseAtFloor(ctx, h.lease(), l.hold, floor)
	} else {
		clean, err = l.c.release(ctx, h.lease(), l.hold)
	}
	now := l.c.now()
	l.c.emit(Event{Kind: EventReleased, Name: h.name, Token: h.token, Duration: now.Sub(h.obtained), Err: err, Owner: h.owner, Context: ctx, Took: now.Sub(sent), Lost: lost})
	if clean && l.c.reuse {
		// After the event: an observer sees this lock released before a next one under its
		// owner is obtained.
		l.c.spareOwner(h)
	}
	return err
}

// lostErr returns the loss of the lock, or nil.
func (l *Lock) lostErr() error {
	if err := l.h.valid(); errors.Is(err, ErrLost) {
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
