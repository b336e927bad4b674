package zkbackend

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// A line is what a lock's line (lockLine) and a semaphore's (permitLine) differ in, to a
// waiter in it; await is the loop they share. Each is made for one waiter, and may keep what
// it learned in look for its wait.
type line interface {
	// list reads the line in dir, first in line first.
	list(ctx context.Context, dir string) ([]entry, error)
	// gone says why the waiter's node is not in q, the line it stood in.
	gone(q []entry) error
	// left wraps the error of the context that ended the wait.
	left(err error) error
	// look tells the waiter at q[i] what to do now, as q says.
	look(ctx context.Context, q []entry, i int) (step, error)
	// wait follows a look that said stepWait, once the request has been told it waits: it
	// tells the waiter what to do next, after a change in line where one is due.
	wait(ctx context.Context, q []entry, i int) (step, error)
}

// A step is what a look at the line, or a wait in it, tells a waiter to do.
type step struct {
	next  next
	owner holding // the owner's node ahead of the waiter's, for stepEnter
}

// next names a waiter's step.
type next int

const (
	stepAgain        next = iota // read the line again: it changed
	stepHold                     // hold, on the read of the line that said so
	stepHoldOnCreate             // hold, on the create that made the node (see standsOnCreate)
	stepEnter                    // enter the owner's node ahead rather than wait behind itself
	stepRefuse                   // leave: the node may not hold now, and was not queued to wait
	stepWait                     // wait, behind others in line
)

// await holds what req asks for once n's turn in l comes, or, not queued, takes n out of line
// again when it has not come. Where the lock and the semaphore differ — what lets n hold, what
// it waits for — l says; the rest is theirs alike: the sync, the grant, leaving the line.
func (b *Backend) await(ctx context.Context, start time.Time, req driver.Request, n *node, l line) (driver.Grant, holding, error) {
	k := keyOf(req.Name, req.Owner, req.Limit)
	if n.first {
		// Made with the directory: alone in line, and a permit's weight is at most the limit.
		return b.seize(ctx, start, k, n, n.sent, true)
	}
	dir := parent(n.path)
	told := false
	for woke := false; ; woke = true {
		if err := ctx.Err(); err != nil {
			return b.leave(ctx, k, n, l.left(err))
		}
		sent := time.Now()
		made := b.standsOnCreate(n)
		var synced <-chan error
		if woke && !made {
			// After a wait, n may hold now: the grant would rest on this read, and must rest
			// on a sync too (see granted). Sent together, they cost one round trip.
			synced = b.syncAsync(dir)
		}
		q, err := l.list(ctx, dir)
		if err != nil {
			return b.leave(ctx, k, n, err)
		}
		i := position(q, n.name)
		n.crowded = len(q) > 1 // others keep the directory: see remove
		if i < 0 {
			return driver.Grant{}, holding{}, l.gone(q)
		}
		s, err := l.look(ctx, q, i)
		if err == nil && s.next == stepWait {
			if !told {
				told = true
				req.StartWait()
			}
			s, err = l.wait(ctx, q, i)
		}
		switch {
		case errors.Is(err, errSessionGone):
			return driver.Grant{}, holding{}, err // n went with the session
		case err != nil:
			return b.leave(ctx, k, n, err)
		case s.next == stepHold && made, s.next == stepHoldOnCreate:
			return b.seizeOnCreate(ctx, start, k, n)
		case s.next == stepHold && synced != nil:
			return b.seizeSynced(ctx, start, k, n, sent, synced)
		case s.next == stepHold:
			return b.seize(ctx, start, k, n, sent, false)
		case s.next == stepEnter:
			g, h, err := b.enter(ctx, start, k, s.owner, req, true)
			if err == errVanished {
				continue
			}
			// n is surplus either way; if it cannot go now, its removal is owed.
			_, _, _ = b.leave(ctx, k, n, nil)
			return g, h, err
		case s.next == stepRefuse:
			return b.leave(ctx, k, n, &driver.HeldError{Name: req.Name, Limit: req.Limit})
		}
	}
}
