package fencelock

import (
	"context"
	"sync"
	"time"
)

// lockContext is the context of one lock handle. It ends when the lock is lost or the handle
// released. Unlike a context from context.WithCancel, its Err and Done read the clock: a holder
// that resumes from a pause past the validity deadline sees the loss on its next check, before
// any timer has had a chance to fire.
//
// It carries the values of the context given to Obtain but not its cancellation: a request
// context that ends does not end the lock; releasing it does.
type lockContext struct {
	parent context.Context
	st     *holdState
	mu     sync.Mutex    // guards done and err
	done   chan struct{} // made on first use: most holders never call Done
	err    error
}

// lockContextKey is the context value key under which a lock context answers with itself, so
// that a nested Obtain on the same Client and name re-enters the lock. It is zero-sized, so
// looking it up allocates nothing.
type lockContextKey struct{}

func (c *lockContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *lockContext) Done() <-chan struct{} {
	c.poll()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *lockContext) Err() error {
	c.poll()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *lockContext) Value(key any) any {
	if _, ok := key.(lockContextKey); ok {
		return c
	}
	return c.parent.Value(key)
}

func (c *lockContext) String() string { return "fencelock.Lock(" + c.st.name + ").Context" }

// poll ends the lock if its validity deadline has passed.
func (c *lockContext) poll() {
	c.mu.Lock()
	over := c.err != nil
	c.mu.Unlock()
	if !over {
		_ = c.st.valid()
	}
}

func (c *lockContext) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
}

// heldState returns the hold state of the lock name on c that ctx carries, if any: ctx is, or
// derives from, the context of such a lock.
func heldState(ctx context.Context, c *Client, name string) *holdState {
	for v := ctx.Value(lockContextKey{}); v != nil; {
		lc := v.(*lockContext)
		if lc.st.c == c && lc.st.name == name {
			return lc.st
		}
		v = lc.parent.Value(lockContextKey{})
	}
	return nil
}
