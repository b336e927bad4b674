package fencelock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// unavailableBackoff spaces the attempts of a waiter while the backend cannot be reached.
var unavailableBackoff = [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, time.Second}

func (c *Client) obtain(ctx context.Context, name string, wait bool, opts []Option) (*Lock, error) {
	if err := c.check(ctx, name); err != nil {
		return nil, err
	}
	s := c.settings(opts)
	if err := s.validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	start := c.now()
	owner, fresh := s.owner, false
	if owner == "" {
		if st := heldState(ctx, c, name); st != nil {
			owner = st.owner
		} else {
			owner, fresh = newOwner(), true
		}
	}
	vctx := ctx
	if s.hasWait {
		if s.waitTimeout == 0 {
			wait = false
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.waitTimeout)
			defer cancel()
		}
	}

	if q, ok := c.b.(Queue); ok && wait && s.retry == nil {
		// The backend keeps the waiters in line; retry only what it could not reach.
		for failures := 0; ; failures++ {
			lock, err := c.attempt(ctx, vctx, name, owner, fresh, &s, q)
			if err == nil || !retryable(err) || ctx.Err() != nil {
				if err != nil && ctx.Err() != nil {
					err = errors.Join(notObtained(err), context.Cause(ctx))
				}
				return c.obtained(name, start, lock, err)
			}
			select {
			case <-time.After(unavailableBackoff[min(failures, len(unavailableBackoff)-1)]):
			case <-ctx.Done():
			}
		}
	}

	lock, err := c.attempt(ctx, vctx, name, owner, fresh, &s, nil)
	if err == nil || !wait || !retryable(err) {
		return c.obtained(name, start, lock, err)
	}

	// Subscribe, then attempt again at once: a release before the subscription is seen by
	// that attempt, and any release after it by the subscription. No wake-up is missed.
	var released <-chan struct{}
	if c.watcher != nil && s.retry == nil {
		ch, stop, werr := c.watcher.WatchRelease(ctx, name)
		if werr == nil {
			defer stop()
			released = ch
			lock, err = c.attempt(ctx, vctx, name, owner, fresh, &s, nil)
			if err == nil || !retryable(err) {
				return c.obtained(name, start, lock, err)
			}
		}
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for {
		var sleep time.Duration
		var held *HeldError
		switch {
		case s.retry != nil:
			if sleep = s.retry.NextBackoff(); sleep <= 0 {
				return c.obtained(name, start, nil, err)
			}
		case errors.As(err, &held):
			failures = 0
			sleep = pttlSleep(held.Remaining)
		default:
			sleep = unavailableBackoff[min(failures, len(unavailableBackoff)-1)]
			failures++
		}
		timer.Reset(sleep)
		slept := c.now()
		select {
		case <-released:
		case <-timer.C:
		case <-ctx.Done():
			err = errors.Join(notObtained(err), context.Cause(ctx))
			return c.obtained(name, start, nil, err)
		}
		c.emit(Event{Kind: EventWaited, Name: name, Duration: c.now().Sub(slept)})
		lock, err = c.attempt(ctx, vctx, name, owner, fresh, &s, nil)
		if err == nil || !retryable(err) {
			return c.obtained(name, start, lock, err)
		}
	}
}

func (c *Client) obtained(name string, start time.Time, lock *Lock, err error) (*Lock, error) {
	if err != nil {
		c.emit(Event{Kind: EventNotObtained, Name: name, Duration: c.now().Sub(start), Err: err})
		return nil, err
	}
	c.emit(Event{Kind: EventObtained, Name: name, Token: lock.st.token, Duration: c.now().Sub(start)})
	return lock, nil
}

// retryable reports whether a waiter should try again after err.
func retryable(err error) bool {
	return !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrLost)
}

func notObtained(err error) error {
	if errors.Is(err, ErrNotObtained) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, err)
}

// pttlSleep is how long a waiter sleeps when no release notification comes: until the
// holder's TTL runs out, plus a little jitter so that waiters do not all retry together.
func pttlSleep(remaining time.Duration) time.Duration {
	if remaining <= 0 {
		return 50 * time.Millisecond
	}
	return remaining + rand.N(min(remaining/10, 20*time.Millisecond)+time.Millisecond)
}
