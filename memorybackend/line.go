package memorybackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// A line is the waiters of a lock, or of a semaphore, first come first. Whatever frees the
// lock or permits (a release, an expiry, a waiter ahead leaving) hands them to the waiters
// first in line inside the same store operation, so the lock is never free while someone
// waits for it. A waiter whose owner holds already (another goroutine of the same owner got it
// first) enters the owner's hold at once.

// handOver gives what is free to the waiters first in line, at now; s.mu is held.
func (s *Store) handOver(e *entry, now time.Time) {
	if e.lock == nil && len(e.lockLine) > 0 {
		w := e.lockLine[0]
		e.lockLine = e.lockLine[1:]
		e.lock = s.newHolder(w.req, 1, now)
		e.lockLast = e.lock.token
		if s.traced != nil {
			s.trace(e, lockOp{at: now, kind: "hand-over", owner: w.req.Owner, hold: w.req.Hold, ttl: w.req.TTL})
		}
		w.reply(driver.Grant{Token: e.lock.token, Count: 1}, nil, now)
	}
	if h := e.lock; h != nil {
		e.lockLine = slices.DeleteFunc(e.lockLine, func(w *waiter) bool {
			if w.req.Owner != h.owner {
				return false
			}
			g := enter(h, w.req, 1, now)
			if s.traced != nil {
				s.trace(e, lockOp{at: now, kind: "hand-over", owner: w.req.Owner, hold: w.req.Hold, ttl: w.req.TTL})
			}
			w.reply(g, nil, now)
			return true
		})
	}
	for {
		// A waiter whose owner holds a permit enters it, wherever it is in line.
		e.permitLine = slices.DeleteFunc(e.permitLine, func(w *waiter) bool {
			if permitOf(e, w.req.Owner) == nil {
				return false
			}
			g, err := s.takePermit(e, w.req, now, 0)
			w.reply(g, err, now)
			return true
		})
		if len(e.permitLine) == 0 {
			return
		}
		w := e.permitLine[0]
		g, err := s.takePermit(e, w.req, now, 0)
		if _, held := err.(*driver.HeldError); held {
			return // none passes a waiter that does not fit
		}
		e.permitLine = e.permitLine[1:]
		w.reply(g, err, now)
	}
}

// reply ends w's wait with a grant made at now, or a refusal.
func (w *waiter) reply(g driver.Grant, err error, now time.Time) {
	if err == nil {
		g.Elapsed = now.Sub(w.start)
	}
	w.done <- grantReply{g, err}
}

// queued waits in line for req, unless the first attempt takes it; b's call wraps it in the
// Backend's faults. A wait that ctx ends, or the Backend's Close, leaves the line;
// a hand-over that came meanwhile is given back.
func (s *Store) queued(ctx context.Context, b *Backend, req driver.Request) (driver.Grant, error) {
	var fx effects
	s.mu.Lock()
	// The store's time now, as every operation reads it under s.mu: not when the call began,
	// which a partition or the simulation's gate may have held up. Run at that earlier time,
	// it handed a lock that had expired meanwhile to the next in line with an expiry already
	// past, which the waiter, told now, trusted a whole TTL from now.
	start := time.Now()
	e := s.get(req.Name)
	s.settle(e, start, &fx)
	var g driver.Grant
	var err error
	line := &e.lockLine
	if req.Limit > 0 {
		line = &e.permitLine
		g, err = s.takePermit(e, req, start, len(e.permitLine))
	} else {
		g, err = s.takeLock(e, req, start)
	}
	_, held := err.(*driver.HeldError)
	if !held {
		s.finish(e, start, &fx)
		s.mu.Unlock()
		fx.run()
		return g, err
	}
	w := &waiter{req: req, start: start, done: make(chan grantReply, 1)}
	*line = append(*line, w)
	s.mu.Unlock()
	fx.run()
	req.StartWait()
	select {
	case r := <-w.done:
		return r.g, r.err
	case <-ctx.Done():
		s.pass(context.WithoutCancel(ctx), b, "leave", req.Name)
		return driver.Grant{}, s.leave(w, line, ctx.Err())
	case <-b.closed:
		return driver.Grant{}, s.leave(w, line, errClosed)
	}
}

var errClosed = fmt.Errorf("%w: memorybackend: the Backend is closed", driver.ErrClosed)

// leave takes w out of line, or gives back what a hand-over gave it meanwhile, and returns why.
func (s *Store) leave(w *waiter, line *[]*waiter, why error) error {
	var fx effects
	s.mu.Lock()
	e := s.get(w.req.Name)
	if i := slices.Index(*line, w); i >= 0 {
		*line = slices.Delete(*line, i, i+1)
	} else if r := <-w.done; r.err == nil {
		lease := driver.Lease{Name: w.req.Name, Owner: w.req.Owner, Token: r.g.Token, Limit: w.req.Limit}
		if w.req.Limit > 0 {
			_, _ = s.releasePermit(e, lease, w.req.Hold, &fx)
		} else {
			_, _ = s.releaseLock(e, lease, w.req.Hold, &fx)
		}
	}
	s.finish(e, time.Now(), &fx)
	s.mu.Unlock()
	fx.run()
	return why
}

var _ driver.LineLister = (*Backend)(nil)

// Line implements driver.LineLister: the waiters in the lock's line, first first, one per
// owner.
func (b *Backend) Line(ctx context.Context, name string) (out []driver.Info, err error) {
	if name == "" {
		return nil, errNoName
	}
	err = b.call(ctx, "line", name, func() error {
		b.s.read(name, func(e *entry, now time.Time) {
			seen := make(map[string]bool)
			if e.lock != nil {
				seen[e.lock.owner] = true
			}
			for _, w := range e.lockLine {
				if !seen[w.req.Owner] {
					seen[w.req.Owner] = true
					out = append(out, driver.Info{Name: name, Owner: w.req.Owner, Meta: w.req.Meta})
				}
			}
		})
		return nil
	})
	return out, err
}
