package memorybackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// A lock has one holder: an owner, with one hold per acquisition (their IDs make a retried
// release harmless), a token issued when the owner took it, and an expiry. A request of the
// holder's owner enters the lock once more; any other waits in the lock's line, or is refused
// with a *driver.HeldError when it makes one attempt.

// takeLock makes one attempt at the lock for req, at now; s.mu is held. A one-attempt request
// takes a free lock whatever the line (the line is never left waiting behind a free lock:
// settle hands it over first).
func (s *Store) takeLock(e *entry, req driver.Request, now time.Time) (g driver.Grant, err error) {
	if s.traced != nil {
		defer func() {
			s.trace(e, lockOp{at: now, kind: "take", owner: req.Owner, hold: req.Hold, ttl: req.TTL, err: err})
		}()
	}
	switch h := e.lock; {
	case h == nil:
		e.lock = s.newHolder(req, 1, now)
		e.lockLast = e.lock.token
		return driver.Grant{Token: e.lock.token, Count: 1}, nil
	case h.owner == req.Owner:
		return enter(h, req, 1, now), nil
	default:
		return driver.Grant{}, &driver.HeldError{Name: req.Name, Remaining: h.expires.Sub(now)}
	}
}

// newHolder is the holder of a first grant of weight to req at now; s.mu is held.
func (s *Store) newHolder(req driver.Request, weight int, now time.Time) *holder {
	h := &holder{owner: req.Owner, token: s.nextToken(), holds: map[string]int{req.Hold: weight}, weight: weight, meta: req.Meta, expires: now.Add(req.TTL)}
	if s.issued != nil {
		s.issued(req.Name, h.token)
	}
	return h
}

// enter adds req's hold to h, its owner's: a re-entry, or a retry of an acquisition it made
// already (the same hold ID), which adds nothing. The TTL only grows: a shorter one must not
// cut another hold's short.
func enter(h *holder, req driver.Request, weight int, now time.Time) driver.Grant {
	if _, ok := h.holds[req.Hold]; !ok {
		h.holds[req.Hold] = weight
	}
	if at := now.Add(req.TTL); at.After(h.expires) {
		h.expires = at
	}
	return driver.Grant{Token: h.token, Count: h.count()}
}

// renewLock renews the lock for lease at now; s.mu is held.
func (s *Store) renewLock(e *entry, lease driver.Lease, now time.Time) (err error) {
	if s.traced != nil {
		defer func() {
			s.trace(e, lockOp{at: now, kind: "renew", owner: lease.Owner, ttl: lease.TTL, refresh: lease.Refresh, holds: lease.Holds, err: err})
		}()
	}
	h := e.lock
	if h == nil || h.owner != lease.Owner || (lease.Token != 0 && h.token != lease.Token) {
		return fmt.Errorf("%w: memorybackend: %q is not this owner's lock", driver.ErrNotHeld, lease.Name)
	}
	extend(h, lease, now)
	return nil
}

// extend sets h's expiry for lease's renewal at now: a Refresh sets it, unless more holds than
// the caller's share the lock (another Client under the same owner); a renewal only extends it.
func extend(h *holder, lease driver.Lease, now time.Time) {
	at := now.Add(lease.TTL)
	if at.After(h.expires) || (lease.Refresh && h.count() <= lease.Holds) {
		h.expires = at
	}
}

// releaseLock ends hold of the lock for lease; s.mu is held. It returns the holds left.
func (s *Store) releaseLock(e *entry, lease driver.Lease, hold string, fx *effects) (n int, err error) {
	if s.traced != nil {
		defer func() { s.trace(e, lockOp{at: time.Now(), kind: "release", owner: lease.Owner, hold: hold, err: err}) }()
	}
	h := e.lock
	if h == nil || h.owner != lease.Owner || (lease.Token != 0 && h.token != lease.Token) {
		return 0, fmt.Errorf("%w: memorybackend: %q is not this owner's lock", driver.ErrNotHeld, lease.Name)
	}
	if _, ok := h.holds[hold]; !ok {
		return h.count(), nil // released already: a retry
	}
	delete(h.holds, hold)
	if n := h.count(); n > 0 {
		return n, nil
	}
	s.dropLock(e, fx, errReleased)
	return 0, nil
}

// lockInfo is what Inspect says of e's lock at now; s.mu is held.
func lockInfo(e *entry, now time.Time) driver.Info {
	info := driver.Info{Name: e.name, Token: e.lockLast}
	if h := e.lock; h != nil {
		info.Held, info.Owner, info.Count, info.Token, info.Remaining, info.Meta = true, h.owner, h.count(), h.token, h.expires.Sub(now), h.meta
	}
	return info
}

var _ driver.Publisher = (*Backend)(nil)

// Publish implements driver.Publisher: the holder's metadata is replaced, and the watches
// of WatchHolder are woken.
func (b *Backend) Publish(ctx context.Context, lease driver.Lease, meta string) error {
	if lease.Name == "" {
		return errNoName
	}
	return b.call(ctx, "publish", lease.Name, func() error {
		var fx effects
		s := b.s
		s.mu.Lock()
		now := time.Now()
		e := s.get(lease.Name)
		s.settle(e, now, &fx)
		h := e.lock
		var err error
		if h == nil || h.owner != lease.Owner || h.token != lease.Token {
			err = fmt.Errorf("%w: memorybackend: %q is not this owner's lock", driver.ErrNotHeld, lease.Name)
		} else {
			h.meta = meta
			for w := range e.released {
				fx.wakes = append(fx.wakes, w)
			}
		}
		s.finish(e, now, &fx)
		s.mu.Unlock()
		fx.run()
		return err
	})
}
