package fencelock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lockContext is the context of one lock handle. It ends when the lock is lost or the handle
// released, with that as its cause (context.Cause). Its Err and Done read the clock: a holder
// that resumes from a pause past the validity deadline sees the loss on its next check, before
// the hold's timer has had a chance to fire.
//
// It carries the values of the context given to Obtain but neither its cancellation nor its
// cause: a request context that ends does not end the lock; releasing it does.
//
// The context that does the work, a WithCancelCause, is made the first time a method of the
// context is called, so that a lock whose context no one uses costs none (two allocations); an
// end before that is kept in cause, and the context is made ended.
type lockContext struct {
	made        atomic.Bool     // inner and cancelCause are set, and read without mu from then on
	mu          sync.Mutex      // guards making inner, and cause
	inner       context.Context // WithCancelCause(&values), once made
	cancelCause context.CancelCauseFunc
	cause       error    // why the context ended before inner was made; nil while it has not
	values      valuesOf // the context given to Obtain, without its cancellation
	h           *hold
	id          string // the hold ID of its Lock, for a release when the Client closes
}

// valuesOf is context.WithoutCancel(parent) inside the lockContext, where it costs no
// allocation of its own: one fewer a lock.
type valuesOf struct{ parent context.Context }

func (*valuesOf) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*valuesOf) Done() <-chan struct{}       { return nil }
func (*valuesOf) Err() error                  { return nil }
func (v *valuesOf) Value(key any) any         { return v.parent.Value(key) }

// lockContextKey is the context value key under which a lock context answers with itself, so
// that a nested Obtain on the same Client and name re-enters the lock. It is zero-sized, so
// looking it up allocates nothing.
type lockContextKey struct{}

func (c *lockContext) init(parent context.Context, h *hold, id string) {
	c.values.parent = parent
	c.h, c.id = h, id
}

// ctx returns the WithCancelCause of c, made at the first call.
func (c *lockContext) ctx() context.Context {
	if c.made.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.made.Load() {
		c.inner, c.cancelCause = context.WithCancelCause(&c.values)
		if c.cause != nil {
			c.cancelCause(c.cause)
		}
		c.made.Store(true)
	}
	return c.inner
}

func (c *lockContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *lockContext) Done() <-chan struct{} {
	_ = c.h.valid()
	return c.ctx().Done()
}

// Err returns the cause: an error that matches ErrLost or ErrNotHeld, and context.Canceled.
func (c *lockContext) Err() error {
	_ = c.h.valid()
	inner := c.ctx()
	if inner.Err() == nil {
		return nil
	}
	return context.Cause(inner)
}

func (c *lockContext) Value(key any) any {
	if _, ok := key.(lockContextKey); ok {
		return c
	}
	return c.ctx().Value(key)
}

func (c *lockContext) String() string { return "fencelock.Lock(" + c.h.name + ").Context" }

// cancel ends c with cause, unless it ended already.
func (c *lockContext) cancel(cause error) {
	if !c.made.Load() {
		c.mu.Lock()
		if !c.made.Load() {
			if c.cause == nil {
				c.cause = cause
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	c.cancelCause(cause)
}

// heldState returns the hold of the lock name on c that ctx carries, if any: ctx is, or
// derives from, the context of such a lock.
func heldState(ctx context.Context, c *Client, name string) *hold {
	for v := ctx.Value(lockContextKey{}); v != nil; {
		lc := v.(*lockContext)
		if lc.h.k == keeper(c) && lc.h.name == name {
			return lc.h
		}
		v = lc.values.Value(lockContextKey{})
	}
	return nil
}
