package fencelock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

// The Client's clean-up: what it owes the store once a call has returned — a hold lost or
// closed while the store may have it still, an acquisition whose outcome was unknown, a release
// not confirmed in time — done in the background, bounded by the cleanup timeout, and waited
// for by Close.

// releaseAll releases, in the background, the holds of lease that the handles had when the
// Client closed, once renewing (a Refresh on its way, or nil) is answered: the Refresh counted
// these holds among the Client's, and after their release it would take another Client's hold
// under the same owner for this one's, and cut that Client's lock short (see Lock.Release).
func (c *Client) releaseAll(lease driver.Lease, handles []*lockContext, renewing <-chan struct{}) {
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		awaitRenewal(ctx, renewing)
		for _, lc := range handles {
			err := c.releaseHold(ctx, lease, lc.id)
			c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
		}
	}()
}

// inBackground counts one more piece of background work for Close to wait for, and reports
// true, unless the Client has closed: the caller then does the work some other way. counted
// says the caller holds a count already (it runs in the background itself, or Close calls it
// before it waits), so that adding one is safe while Close waits.
func (c *Client) inBackground(counted bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed && !counted {
		return false
	}
	c.background.Add(1)
	return true
}

// awaitRenewal waits, within ctx, until renewing, a renewal on its way (nil for none), is
// answered. What the background ends of a hold follows the renewal: a Refresh counted the hold
// among the Client's (driver.Lease.Holds), and after the hold's release the store could take
// another hold of the owner (another Client's, or one this Client keeps for its minimum) for
// this one, and cut it short. Past ctx, the clean-up goes on, or leaves the lock to its TTL.
func awaitRenewal(ctx context.Context, renewing <-chan struct{}) {
	if renewing == nil {
		return
	}
	select {
	case <-renewing:
	case <-ctx.Done():
	}
}

// letGo releases, in the background, the handle hold of a hold that ended with the store's
// answers still owed, once renewing is answered (awaitRenewal): kept until floor when that is
// still ahead (keeper).
func (c *Client) letGo(renewing <-chan struct{}, lease driver.Lease, hold string, floor time.Time) {
	if c.now().Before(floor) {
		c.keepInBackground(renewing, lease, hold, floor, false)
		return
	}
	c.undoOrLeave(renewing, lease, hold)
}

// release ends one hold in the store within ctx: an attempt whose outcome is unknown is tried
// again with the same hold ID, and when ctx ends before one is confirmed, the background goes
// on with it. It reports clean when the first attempt released the last hold of the owner:
// the store has nothing of it left, and no request of it is unanswered.
func (c *Client) release(ctx context.Context, lease driver.Lease, hold string) (clean bool, err error) {
	for attempt := 0; ; attempt++ {
		var n int
		n, err = c.b.Release(ctx, lease, hold)
		switch {
		case err == nil:
			return attempt == 0 && n == 0, nil
		case errors.Is(err, ErrNotHeld):
			if attempt > 0 {
				return false, nil // an earlier attempt whose outcome was unknown released it
			}
			return false, err
		case errors.Is(err, ErrInvalid):
			return false, err
		}
		if attempt == 2 || !pause.For(ctx, 10*time.Millisecond<<(2*attempt)) {
			break
		}
	}
	c.undoOrLeave(nil, lease, hold)
	return false, err
}

// undo ends a hold in the store in the background, for at most the cleanup timeout: an
// acquisition that may have taken the lock but was not handed out, a release not confirmed in
// time, or a lost hold's, after renewing, the renewal on its way (nil for none; see
// awaitRenewal). A hold the store does not have is done. The outcome goes to the observer.
// Once the Client has closed, nothing runs in the background: undo does nothing and reports
// false (see undoOrLeave).
func (c *Client) undo(renewing <-chan struct{}, lease driver.Lease, hold string) bool {
	k := holdKey{name: lease.Name, permit: lease.Limit > 0}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.background.Add(1)
		u := c.undoing[k]
		if u == nil {
			u = &undos{done: make(chan struct{})}
			c.undoing[k] = u
		}
		u.n++
	}
	c.mu.Unlock()
	if closed {
		return false
	}
	go func() {
		defer c.background.Done()
		defer func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			u := c.undoing[k]
			if u.n--; u.n == 0 {
				close(u.done)
				delete(c.undoing, k)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		awaitRenewal(ctx, renewing)
		err := c.releaseHold(ctx, lease, hold)
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
	}()
	return true
}

// undoOrLeave is undo, but once the Client has closed, the hold is left to expire with its
// TTL, and the observer hears of a clean-up that failed with ErrClosed.
func (c *Client) undoOrLeave(renewing <-chan struct{}, lease driver.Lease, hold string) {
	if !c.undo(renewing, lease, hold) {
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Err: ErrClosed, Owner: lease.Owner})
	}
}

// releaseNow ends, within the call's slack (afterCall), a hold that a call of a Client that
// closed during it may have taken: no background is left to undo it in. The observer hears
// of it as of the background's clean-ups; when it fails, release has told it already
// (undoOrLeave: ErrClosed, the lock is left to its TTL).
func (c *Client) releaseNow(ctx context.Context, lease driver.Lease, hold string) {
	rctx, cancel := afterCall(ctx)
	defer cancel()
	_, err := c.release(rctx, lease, hold)
	if errors.Is(err, ErrNotHeld) {
		err = nil
	}
	if err == nil || errors.Is(err, ErrInvalid) {
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
	}
}

// releaseHold ends one hold in the store for clean-up, within ctx: a few tries, spaced out,
// since a store that cannot be reached now is often busy, and a flood of clean-up would keep
// it so. A hold the store does not have is done. What is left expires with its TTL.
func (c *Client) releaseHold(ctx context.Context, lease driver.Lease, hold string) error {
	var err error
	for _, wait := range undoWaits {
		if !pause.For(ctx, wait) {
			if err == nil {
				err = context.Cause(ctx)
			}
			return err
		}
		_, err = c.b.Release(ctx, lease, hold)
		if err == nil || errors.Is(err, ErrNotHeld) {
			return nil
		}
		if errors.Is(err, ErrInvalid) {
			return err
		}
	}
	return err
}

// undone waits, within ctx, until no undo of the name of k is left in the background: a fresh
// owner's acquisition would otherwise meet what the Client is still undoing of an earlier one,
// and be refused by its own leftover, or wait behind it in line.
func (c *Client) undone(ctx context.Context, k holdKey) error {
	c.mu.Lock()
	u := c.undoing[k]
	c.mu.Unlock()
	if u == nil {
		return nil
	}
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the undo of an earlier acquisition or release of %q by this Client: %w", k.name, context.Cause(ctx))
	}
}
