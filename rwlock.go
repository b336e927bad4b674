package fencelock

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/driver"
)

// RWReaders is how many read locks an RWLock admits at once.
const RWReaders = driver.RWReaders

// RWLock is a named read-write lock: many readers share it, a writer holds it alone. It is a
// semaphore of RWReaders permits of the same name, kept by a backend that keeps semaphores
// (Redis, etcd, ZooKeeper): a reader takes one permit, a writer all of them, and waiters are
// served first come, first served — so a writer that waits stops the readers that come after
// it, and is never starved by a stream of readers. Do not give a Semaphore the name of an RWLock: the
// backend refuses the mix of limits with a *LimitError.
//
// Each lock taken is a *Lock, with a token of its own (a write lock's tokens strictly
// increase, as a mutex's do: a store fences writes with them), a context that ends on loss,
// the watchdog, Refresh and Release.
//
// Re-entry, through the context of a lock taken from the same Client (or WithOwner):
//   - a read lock under a read lock, or a write lock under a write lock, enters the same hold;
//   - a read lock under a write lock enters it as a reader: releasing the write lock then
//     downgrades the holder to a reader, with no moment unlocked in between, so no waiting
//     writer gets in first;
//   - a write lock under a read lock is refused at once with an error matching ErrUpgrade:
//     two readers that each waited to upgrade would wait for each other forever. Release the
//     read lock, then take the write lock.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the read-write lock name. It makes no call.
func (c *Client) RWLock(name string) *RWLock { return &RWLock{c: c, name: name} }

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

// RLock takes a read lock, waiting while a writer holds the lock or waits ahead, or until ctx
// ends.
func (rw *RWLock) RLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.obtain(ctx, 1, true, opts)
}

// TryRLock makes one attempt at a read lock.
func (rw *RWLock) TryRLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.obtain(ctx, 1, false, opts)
}

// Lock takes the write lock, waiting until no one else holds the lock, or until ctx ends.
func (rw *RWLock) Lock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.obtain(ctx, RWReaders, true, opts)
}

// TryLock makes one attempt at the write lock.
func (rw *RWLock) TryLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.obtain(ctx, RWReaders, false, opts)
}

// Inspect reports the lock's holders: Permits are the readers, or the one writer (Weight
// RWReaders), and Waiting the waiters in line.
func (rw *RWLock) Inspect(ctx context.Context) (SemaphoreInfo, error) {
	return rw.c.Semaphore(rw.name, RWReaders).Inspect(ctx)
}

func (rw *RWLock) obtain(ctx context.Context, weight int, wait bool, opts []Option) (*Lock, error) {
	s := rw.c.Semaphore(rw.name, RWReaders)
	if err := s.usable(); err != nil {
		return nil, err
	}
	opts = append(append([]Option{}, opts...), func(s *settings) { s.weight, s.reenter = weight, true })
	lock, err := rw.c.obtain(ctx, rw.name, RWReaders, wait, opts)
	if errors.Is(err, ErrUpgrade) {
		return nil, fmt.Errorf("%w: %q: a write lock under its own read lock; release the read lock, then take the write lock", ErrUpgrade, rw.name)
	}
	if held, ok := err.(*HeldError); ok && held.Limit > 0 {
		// A semaphore's wording would count a million permits.
		return nil, &HeldError{Name: held.Name, Remaining: held.Remaining}
	}
	return lock, err
}
