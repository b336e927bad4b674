package memorybackend

import (
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// A semaphore of limit L has at most L permits taken: a holder (an owner) takes as many as the
// largest of its holds asked for (a read lock takes 1 of an RWLock's, a write lock all). Its
// holders agree on L: while permits are held, or waiters wait, a request with another limit is
// refused with a *driver.LimitError. Waiters are served first come, first served, and none
// passes one before it.

// maxLimit bounds a semaphore's limit as the Redis backend does, so that the model refuses what
// the stores refuse.
const maxLimit = 1 << 53

// agreed is the limit the semaphore's holders, or else its first waiter, asked for; 0 when
// there are none; s.mu is held.
func agreed(e *entry) int {
	switch {
	case len(e.permits) > 0:
		return e.limit
	case len(e.permitLine) > 0:
		return e.permitLine[0].req.Limit
	}
	return 0
}

// used is how many permits are taken; s.mu is held.
func used(e *entry) int {
	n := 0
	for _, p := range e.permits {
		n += p.weight
	}
	return n
}

// permitOf is owner's permit, or nil; s.mu is held.
func permitOf(e *entry, owner string) *holder {
	for _, p := range e.permits {
		if p.owner == owner {
			return p
		}
	}
	return nil
}

// weight is what req asks for: at least 1.
func weight(req driver.Request) int { return max(req.Weight, 1) }

// checkPermit says why req cannot ask for a permit at all.
func checkPermit(req driver.Request) error {
	switch {
	case req.Limit > maxLimit:
		return fmt.Errorf("%w: semaphore %q: limit %d: the stores count permits exactly up to 2^53", driver.ErrInvalid, req.Name, req.Limit)
	case weight(req) > req.Limit:
		return fmt.Errorf("%w: semaphore %q: weight %d above the limit %d", driver.ErrInvalid, req.Name, weight(req), req.Limit)
	}
	return nil
}

// takePermit makes one attempt at a permit for req at now, counting the waiters in line ahead
// of it: all of them for a one-attempt call (ahead = len(line)), those before it for a waiter;
// s.mu is held.
func (s *Store) takePermit(e *entry, req driver.Request, now time.Time, ahead int) (driver.Grant, error) {
	w := weight(req)
	if p := permitOf(e, req.Owner); p != nil {
		if e.limit != req.Limit {
			// The owner's permit was taken under the limit its holders agreed on: a re-entry
			// under another is refused as any caller of it is (etcd and ZooKeeper do so).
			return driver.Grant{}, &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: e.limit}
		}
		if w > p.weight {
			return driver.Grant{}, fmt.Errorf("%w: %q: this owner holds %d permits and asks for %d", driver.ErrUpgrade, req.Name, p.weight, w)
		}
		return enter(p, req, w, now), nil
	}
	if l := agreed(e); l != 0 && l != req.Limit {
		return driver.Grant{}, &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: l}
	}
	taken := used(e)
	for _, q := range e.permitLine[:ahead] {
		taken += weight(q.req)
	}
	if taken+w > req.Limit {
		held := &driver.HeldError{Name: req.Name, Limit: req.Limit}
		for _, p := range e.permits {
			if left := p.expires.Sub(now); held.Remaining == 0 || left < held.Remaining {
				held.Remaining = left
			}
		}
		return driver.Grant{}, held
	}
	p := s.newHolder(req, w, now)
	e.permits = append(e.permits, p)
	e.limit, e.permitLast = req.Limit, p.token
	return driver.Grant{Token: p.token, Count: 1}, nil
}

// renewPermit renews owner's permit for lease at now; s.mu is held.
func (s *Store) renewPermit(e *entry, lease driver.Lease, now time.Time) error {
	p := permitOf(e, lease.Owner)
	if p == nil || (lease.Token != 0 && p.token != lease.Token) {
		return fmt.Errorf("%w: memorybackend: no permit of semaphore %q is this owner's", driver.ErrNotHeld, lease.Name)
	}
	extend(p, lease, now)
	return nil
}

// releasePermit ends hold of owner's permit; the permits the holds left no longer need go back.
// s.mu is held. It returns the holds left.
func (s *Store) releasePermit(e *entry, lease driver.Lease, hold string, fx *effects) (int, error) {
	p := permitOf(e, lease.Owner)
	if p == nil || (lease.Token != 0 && p.token != lease.Token) {
		return 0, fmt.Errorf("%w: memorybackend: no permit of semaphore %q is this owner's", driver.ErrNotHeld, lease.Name)
	}
	if _, ok := p.holds[hold]; !ok {
		return p.count(), nil // released already: a retry
	}
	delete(p.holds, hold)
	if p.count() == 0 {
		s.dropPermit(e, p, fx, errReleased)
		return 0, nil
	}
	p.weight = 0
	for _, w := range p.holds {
		p.weight = max(p.weight, w)
	}
	return p.count(), nil
}

// semaphoreInfo is what InspectSemaphore says of e at now; s.mu is held.
func semaphoreInfo(e *entry, now time.Time) driver.SemaphoreInfo {
	info := driver.SemaphoreInfo{Name: e.name, Waiting: len(e.permitLine), Token: e.permitLast}
	if len(e.permits) > 0 {
		info.Limit = e.limit
	}
	for _, p := range e.permits {
		info.InUse += p.weight
		info.Permits = append(info.Permits, driver.Info{Name: e.name, Held: true, Owner: p.owner, Count: p.count(),
			Token: p.token, Remaining: p.expires.Sub(now), Meta: p.meta, Weight: p.weight})
	}
	// The first to expire first, as the real backends list them.
	for i := 1; i < len(info.Permits); i++ {
		for j := i; j > 0 && info.Permits[j].Remaining < info.Permits[j-1].Remaining; j-- {
			info.Permits[j], info.Permits[j-1] = info.Permits[j-1], info.Permits[j]
		}
	}
	return info
}
