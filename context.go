package fencelock

import (
	"context"
	"time"
)

// lockContext is the context of one lock handle. It ends when the lock is lost or the handle
// released, with that as its cause (context.Cause). Its Err and Done read the clock: a holder
// that resumes from a pause past the validity deadline sees the loss on its next check, before
// the hold's timer has had a chance to fire.
//
// It carries the values of the context given to Obtain but neither its cancellation nor its
// cause: a request context that ends does not end the lock; releasing it does.
type lockContext struct {
	context.Context // WithCancelCause(&values)
	cancelCause     context.CancelCauseFunc
	values          valuesOf // the context given to Obtain, without its cancellation
	h               *hold
	id              string // the hold ID of its Lock, for a release when the Client closes
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
	c.Context, c.cancelCause = context.WithCancelCause(&c.values)
	c.h, c.id = h, id
}

func (c *lockContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *lockContext) Done() <-chan struct{} {
	_ = c.h.valid()
	return c.Context.Done()
}

// Err returns the cause: an error that matches ErrLost or ErrNotHeld, and context.Canceled.
func (c *lockContext) Err() error {
	_ = c.h.valid()
	if c.Context.Err() == nil {
		return nil
	}
	return context.Cause(c.Context)
}

func (c *lockContext) Value(key any) any {
	if _, ok := key.(lockContextKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *lockContext) String() string { return "fencelock.Lock(" + c.h.name + ").Context" }

func (c *lockContext) cancel(cause error) { c.cancelCause(cause) }

// heldState returns the hold of the lock name on c that ctx carries, if any: ctx is, or
// derives from, the context of such a lock.
func heldState(ctx context.Context, c *Client, name string) *hold {
	for v := ctx.Value(lockContextKey{}); v != nil; {
		lc := v.(*lockContext)
		if lc.h.k == keeper(c) && lc.h.name == name {
			return lc.h
		}
		v = lc.Context.Value(lockContextKey{})
	}
	return nil
}
