package fencelock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

// releaseAtFloor ends the last hold of a lock released before floor, its WithMinHold end:
// the name stays taken until floor. On a store that ends locks by their TTL, a Refresh sets
// the TTL to what is left, and the store lets the lock go by itself; elsewhere, or when that
// Refresh's outcome is unknown, the Client releases the hold at floor in the background
// (Close waits for it). A lock lost meanwhile is an error matching ErrNotHeld; a Refresh whose
// outcome is unknown is an error matching ErrUnavailable, and is tried again in the background
// (keepAgain): until one arrives, the store may let the lock go when the TTL it had runs out,
// before floor.
func (c *Client) releaseAtFloor(ctx context.Context, lease driver.Lease, hold string, floor time.Time) error {
	lease.Holds = 1 // the last of the Client's
	return c.keepUntil(ctx, lease, hold, floor, false)
}

// keepUntil is releaseAtFloor for one of lease.Holds holds the Client ends at once; counted
// says the caller holds a count of c.background, so that adding one more is safe while Close
// waits.
func (c *Client) keepUntil(ctx context.Context, lease driver.Lease, hold string, floor time.Time, counted bool) error {
	var unknown error
	if c.expires {
		err := c.keepTTL(ctx, lease, floor)
		if errors.Is(err, errFloorPassed) {
			_, err = c.release(ctx, lease, hold)
			return err
		}
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrInvalid) {
			return err
		}
		unknown = fmt.Errorf("%w: the lock's TTL was not set to the rest of its minimum hold, and it may go when the TTL it had runs out unless a retry in the background sets it first: %w", ErrUnavailable, err)
	}
	if !c.inBackground(counted) {
		// The Client's Close is under way and does not wait for this: release now.
		_, err := c.release(ctx, lease, hold)
		return cmp.Or(unknown, err)
	}
	go func() {
		defer c.background.Done()
		if unknown != nil {
			err := c.keepAgain(lease, floor)
			if err == nil || errors.Is(err, ErrNotHeld) {
				// The store lets the lock go at floor by itself, or has let it go.
				c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
				return
			}
		}
		pause.For(context.Background(), floor.Sub(c.now()))
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		err := c.releaseHold(ctx, lease, hold)
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
	}()
	return unknown
}

// keepTTL sets the TTL of lease's lock to end at floor (rounded up to the millisecond), as a
// Refresh of lease.Holds holds: the store shortens the TTL only when no other hold shares the
// lock, and lengthens it otherwise.
func (c *Client) keepTTL(ctx context.Context, lease driver.Lease, floor time.Time) error {
	lease.Refresh = true
	lease.TTL = (floor.Sub(c.now()) + time.Millisecond - 1).Truncate(time.Millisecond)
	if lease.TTL <= 0 {
		return errFloorPassed
	}
	r := c.b.Renew(ctx, []driver.Lease{lease})
	if len(r) == 0 {
		return fmt.Errorf("%w: backend returned no renewal result", ErrUnavailable)
	}
	return r[0].Err
}

// errFloorPassed is keepTTL's when floor has passed: the lock is to be released now.
var errFloorPassed = errors.New("the minimum hold has passed")

// keepAgain tries again, in the background, a keepTTL whose outcome was unknown: a release
// before the minimum cut off from the store (its context ended, a reply lost) would otherwise
// leave the lock with the TTL it had, and another owner could take the name before floor. It
// tries after each of keepWaits, within the cleanup timeout and before floor, and returns the
// last outcome (errFloorPassed when floor came first). Each attempt ends the lock at floor
// counted from its send, or later when it arrives late, so a first attempt that did reach the
// store is harmless; like it, a retry shortens the TTL only while this hold is the lock's
// only one.
func (c *Client) keepAgain(lease driver.Lease, floor time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cleanupTimeout, floor.Sub(c.now())))
	defer cancel()
	err := context.DeadlineExceeded
	for _, wait := range keepWaits {
		if !pause.For(ctx, wait) {
			return err
		}
		if err = c.keepTTL(ctx, lease, floor); err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrInvalid) || errors.Is(err, errFloorPassed) {
			return err
		}
	}
	return err
}

// keepWaits are the pauses before each retry of keepAgain: soon, for a reply that was lost,
// then later, for a store that is out of reach for a while.
var keepWaits = [...]time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond}

// keepInBackground ends, in the background, a hold that ended before floor with no caller to
// wait for it — lost at its deadline or its cap, or its Client closing (closing: Close calls
// it before it waits for the background) — as releaseAtFloor does, once renewing, the renewal
// on its way, is answered (awaitRenewal): its lock is trusted no more, but its name stays
// taken until floor.
func (c *Client) keepInBackground(renewing <-chan struct{}, lease driver.Lease, hold string, floor time.Time, closing bool) {
	if !c.inBackground(closing) {
		c.undoOrLeave(renewing, lease, hold)
		return
	}
	go func() {
		defer c.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		awaitRenewal(ctx, renewing)
		if err := c.keepUntil(ctx, lease, hold, floor, true); err != nil {
			c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
		}
	}()
}
