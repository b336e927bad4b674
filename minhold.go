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
// outcome is unknown is an error matching ErrUnavailable: the store may let the lock go when
// the TTL it had runs out, before floor.
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
		lease.Refresh = true
		lease.TTL = (floor.Sub(c.now()) + time.Millisecond - 1).Truncate(time.Millisecond)
		if lease.TTL <= 0 {
			_, err := c.release(ctx, lease, hold)
			return err
		}
		err := c.b.Renew(ctx, []driver.Lease{lease})[0].Err
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrInvalid) {
			return err
		}
		unknown = fmt.Errorf("%w: the lock's TTL was not set to the rest of its minimum hold, and it may go when the TTL it had runs out: %w", ErrUnavailable, err)
	}
	if !c.inBackground(counted) {
		// The Client's Close is under way and does not wait for this: release now.
		_, err := c.release(ctx, lease, hold)
		return cmp.Or(unknown, err)
	}
	go func() {
		defer c.background.Done()
		pause.For(context.Background(), floor.Sub(c.now()))
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		err := c.releaseHold(ctx, lease, hold)
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
	}()
	return unknown
}

// keepInBackground ends, in the background, a hold that ended before floor with no caller to
// wait for it — lost at its deadline or its cap, or its Client closing (closing: Close calls
// it before it waits for the background) — as releaseAtFloor does: its lock is trusted no
// more, but its name stays taken until floor.
func (c *Client) keepInBackground(lease driver.Lease, hold string, floor time.Time, closing bool) {
	if !c.inBackground(closing) {
		c.undo(lease, hold)
		return
	}
	go func() {
		defer c.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		if err := c.keepUntil(ctx, lease, hold, floor, true); err != nil {
			c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
		}
	}()
}
