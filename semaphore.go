package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/driver"
)

// Semaphore is a named semaphore of Limit permits, kept by the Client's backend: at most
// Limit holders at once across every process that asks for it with the same name and limit.
//
// A permit is a *Lock: it has its own fencing token (strictly increasing per semaphore name,
// across expiry and restarts as a lock's are), a context that ends the moment it is lost, the
// watchdog, Refresh and Release. A permit whose holder crashed returns to the semaphore when
// its TTL runs out; a Release by a holder whose permit expired cannot free another's.
//
// Each Acquire takes a permit of its own, even with a permit's context: permits are not
// re-entered by context, so a holder that asks again while all are held waits for someone
// else's. WithOwner names the permit: an Acquire with the owner of a permit held enters that
// permit once more instead (its hold count goes up), as Obtain does for a lock.
//
// Holders that disagree on the limit get a *LimitError (matching ErrInvalid) while permits
// are held: the limit is fixed by the first permit granted, until none is held.
type Semaphore struct {
	c     *Client
	name  string
	limit int
}

// Semaphore returns the semaphore name of limit permits. It makes no call: an unusable name,
// a limit below 1 or a backend that keeps no semaphores fail each call with ErrInvalid.
func (c *Client) Semaphore(name string, limit int) *Semaphore {
	return &Semaphore{c: c, name: name, limit: limit}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the number of permits the semaphore was asked for with.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes a permit, waiting until one is free or ctx ends, as Client.Obtain waits for a
// lock. Waiters on a backend that keeps a line (Redis, etcd, ZooKeeper) are served first come,
// first served, and wake when a permit is released or expires.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	return s.c.obtain(ctx, s.name, s.limit, true, opts)
}

// TryAcquire makes one attempt to take a permit. It fails with a *HeldError (matching
// ErrNotObtained) when all permits are held, or promised to waiters in line.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	return s.c.obtain(ctx, s.name, s.limit, false, opts)
}

// Do takes a permit, runs fn under its context and releases it, as Client.Do does for a lock.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	return do(ctx, fn, func() (*Lock, error) { return s.Acquire(ctx, opts...) })
}

// Inspect reports the semaphore's permits as the backend sees them.
func (s *Semaphore) Inspect(ctx context.Context) (SemaphoreInfo, error) {
	if err := s.usable(); err != nil {
		return SemaphoreInfo{}, err
	}
	if err := s.c.check(ctx, s.name); err != nil {
		return SemaphoreInfo{}, err
	}
	info, err := s.c.b.(driver.Semaphores).InspectSemaphore(ctx, s.name)
	return s.c.basedSemaphore(info), err
}

// usable says why s cannot be used at all.
func (s *Semaphore) usable() error {
	if err := s.c.ready(context.Background()); err != nil {
		return err
	}
	if s.limit < 1 {
		return invalidf("semaphore %q: limit %d: want 1 or more", s.name, s.limit)
	}
	if _, ok := s.c.b.(driver.Semaphores); !ok {
		return errNoSemaphores
	}
	return nil
}
