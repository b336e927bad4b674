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
	done   chan struct{}
	mu     sync.Mutex // guards err
	err    error
}

// heldKey is the context value key under which a lock context answers with its hold state, so
// that a nested Obtain on the same Client and name re-enters the lock.
type heldKey struct {
	c    *Client
	name string
}

func newLockContext(parent context.Context, st *holdState) *lockContext {
	return &lockContext{parent: parent, st: st, done: make(chan struct{})}
}

func (c *lockContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *lockContext) Done() <-chan struct{} {
	c.poll()
	return c.done
}

func (c *lockContext) Err() error {
	c.poll()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *lockContext) Value(key any) any {
	if k, ok := key.(heldKey); ok && k.c == c.st.c && k.name == c.st.name {
		return c.st
	}
	return c.parent.Value(key)
}

func (c *lockContext) String() string { return "fencelock.Lock(" + c.st.name + ").Context" }

// poll ends the lock if its validity deadline has passed.
func (c *lockContext) poll() {
	select {
	case <-c.done:
	default:
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
	close(c.done)
}

// heldState returns the live hold state of name on c that ctx carries, if any.
func heldState(ctx context.Context, c *Client, name string) *holdState {
	st, _ := ctx.Value(heldKey{c, name}).(*holdState)
	return st
}
