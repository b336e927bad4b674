package fencelock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MultiLock is several locks obtained together by ObtainAll or TryObtainAll: all of them, or
// none. Its context ends when any of them is lost or when it is released, and carries every
// lock, so that an Obtain of one of its names through it re-enters that lock. It is safe for
// concurrent use.
type MultiLock struct {
	locks []*Lock // by name, in the order they were taken
	ctx   *multiContext
	once  sync.Once
	err   error
}

// ObtainAll obtains the locks names, each with opts, waiting for each as Obtain does, and
// returns them as one MultiLock. The names are taken one at a time in one order, sorted, and a
// name given twice is taken once: callers that want overlapping sets, in whatever order they
// list them, never wait for each other in a cycle. When a lock cannot be obtained, or ctx ends
// (WithWaitTimeout bounds the whole call), the locks taken so far are released and ObtainAll
// returns by ctx's deadline with an error that names the lock and matches what its Obtain
// returned. Names may live anywhere in the store: on Redis Cluster, in different slots.
func (c *Client) ObtainAll(ctx context.Context, names []string, opts ...Option) (*MultiLock, error) {
	return c.obtainAll(ctx, names, true, opts)
}

// TryObtainAll makes one attempt at each of the locks names, as TryObtain does, in the order
// ObtainAll takes them: all of them, or, when one is held, none (those taken are released)
// and an error that names the lock and matches ErrNotObtained.
func (c *Client) TryObtainAll(ctx context.Context, names []string, opts ...Option) (*MultiLock, error) {
	return c.obtainAll(ctx, names, false, opts)
}

func (c *Client) obtainAll(ctx context.Context, names []string, wait bool, opts []Option) (*MultiLock, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, invalidf("no lock names")
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if sorted[0] == "" {
		return nil, invalidf("empty lock name")
	}
	if s := c.settings(opts); s.hasWait && s.waitTimeout > 0 {
		// The timeout bounds the call, not each name's wait.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.waitTimeout)
		defer cancel()
	}
	m := &MultiLock{locks: make([]*Lock, 0, len(sorted))}
	for _, name := range sorted {
		// Each lock is obtained under the caller's ctx, and carries those before it: its
		// context re-enters all of them.
		octx := ctx
		if n := len(m.locks); n > 0 {
			octx = chainedContext{ctx, m.locks[n-1].Context()}
		}
		var l *Lock
		var err error
		if wait {
			l, err = c.Obtain(octx, name, opts...)
		} else {
			l, err = c.TryObtain(octx, name, opts...)
		}
		if err == nil {
			m.locks = append(m.locks, l)
			continue
		}
		m.abandon(ctx, c.cleanupTimeout)
		return nil, &MultiError{Name: name, Err: err}
	}
	for _, l := range m.locks {
		if err := l.Valid(); err != nil {
			// Lost while the others were taken: the set was never held whole.
			m.abandon(ctx, c.cleanupTimeout)
			return nil, &MultiError{Name: l.Name(), Err: fmt.Errorf("%w: lost while the other locks were taken: %w", ErrNotObtained, err)}
		}
	}
	m.ctx = newMultiContext(m.locks)
	return m, nil
}

// abandon releases the locks taken by a call that failed, within ctx and at most timeout:
// what ctx cuts short goes on in the background, as any Release's does.
func (m *MultiLock) abandon(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, l := range slices.Backward(m.locks) {
		_ = l.Release(ctx)
	}
}

// MultiError is the error of an ObtainAll or TryObtainAll that did not get Name: Err is what
// its Obtain or TryObtain returned. errors.Is and errors.As see through it to Err.
type MultiError struct {
	Name string
	Err  error
}

func (e *MultiError) Error() string { return fmt.Sprintf("lock %q of the set: %v", e.Name, e.Err) }
func (e *MultiError) Unwrap() error { return e.Err }

// Locks returns the locks, sorted by name.
func (m *MultiLock) Locks() []*Lock { return slices.Clone(m.locks) }

// Lock returns the lock name of the set, or nil when the set has none of that name.
func (m *MultiLock) Lock(name string) *Lock {
	if i, ok := slices.BinarySearchFunc(m.locks, name, func(l *Lock, name string) int {
		switch n := l.Name(); {
		case n < name:
			return -1
		case n > name:
			return 1
		}
		return 0
	}); ok {
		return m.locks[i]
	}
	return nil
}

// Token returns the fencing token of the lock name, to pass to the store that name guards; 0
// when the set has no lock of that name.
func (m *MultiLock) Token(name string) int64 {
	if l := m.Lock(name); l != nil {
		return l.Token()
	}
	return 0
}

// Context returns a context that ends when any lock of the set is lost, with that loss as its
// cause, or when the set is released. An Obtain through it of a name of the set re-enters
// that lock.
func (m *MultiLock) Context() context.Context {
	if m == nil {
		return closedContext{}
	}
	return m.ctx
}

// Valid returns nil while every lock of the set is held, or the error of the first one that
// is not.
func (m *MultiLock) Valid() error {
	if m == nil {
		return fmt.Errorf("%w: nil lock", ErrNotHeld)
	}
	for _, l := range m.locks {
		if err := l.Valid(); err != nil {
			return &MultiError{Name: l.Name(), Err: err}
		}
	}
	return nil
}

// Release releases every lock of the set, the last taken first, and ends its context. It
// returns the errors of those that failed, joined; a second Release returns the first one's
// result.
func (m *MultiLock) Release(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: nil lock", ErrNotHeld)
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	m.once.Do(func() {
		var errs []error
		for _, l := range slices.Backward(m.locks) {
			if err := l.Release(ctx); err != nil {
				errs = append(errs, &MultiError{Name: l.Name(), Err: err})
			}
		}
		m.ctx.cancel(releasedError{})
		m.err = errors.Join(errs...)
	})
	return m.err
}

// chainedContext is a context whose cancellation, deadline and values are its Context's, but
// for the lock chain (see heldState), which is held's: the acquisition of the next name of a
// set waits under the caller's context and carries the locks taken before it.
type chainedContext struct {
	context.Context
	held context.Context
}

func (c chainedContext) Value(key any) any {
	if _, ok := key.(lockContextKey); ok {
		return c.held.Value(key)
	}
	return c.Context.Value(key)
}

// multiContext is a MultiLock's context: the last lock's context, whose chain carries the
// others, ended also by the end of any of theirs. Done and Err read the clock through every
// lock, as a lock's context does.
type multiContext struct {
	context.Context
	cancel context.CancelCauseFunc
	locks  []*Lock
}

func newMultiContext(locks []*Lock) *multiContext {
	ctx, cancel := context.WithCancelCause(locks[len(locks)-1].Context())
	mc := &multiContext{Context: ctx, cancel: cancel, locks: locks}
	for _, l := range locks[:len(locks)-1] {
		lctx := l.Context()
		context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	}
	return mc
}

func (c *multiContext) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

func (c *multiContext) Err() error {
	c.check()
	if c.Context.Err() == nil {
		return nil
	}
	return context.Cause(c.Context)
}

// check ends the context when a lock's validity has passed, though no timer fired yet.
func (c *multiContext) check() {
	for _, l := range c.locks {
		if err := l.h.valid(); err != nil && errors.Is(err, ErrLost) {
			c.cancel(err)
			return
		}
	}
}

func (c *multiContext) String() string { return "fencelock.MultiLock.Context" }
