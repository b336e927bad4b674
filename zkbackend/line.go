package zkbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

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

// errSessionGone says a waiter's node went with its session: go-zookeeper ended the watch.
var errSessionGone = errors.New("fencelock/zk: the session ended while waiting")

// standsOnCreate reports whether a grant of n, once a read finds it first in line (or its
// permits fitting), can rest on the create that made it, with no sync: the create was a write,
// which the leader answered, so n's session lived there when it was sent, and n, once first,
// stays first until it goes, as a permit node keeps the permits that fit. It can while n is of
// the Backend's session and was made less than a quarter of the session timeout ago, which the
// grant's validity counts from: a waiter that waited longer syncs, for a validity counted from
// its read.
func (b *Backend) standsOnCreate(n *node) bool {
	return !n.sent.IsZero() && n.stat != nil && n.session == b.conn.SessionID() && time.Since(n.sent) < b.validity/4
}

// syncAsync syncs the connection's server with the leader, and sends the outcome on the
// channel it returns.
func (b *Backend) syncAsync(path string) <-chan error {
	synced := make(chan error, 1)
	b.flights.start()
	go func() {
		defer b.flights.end()
		_, err := b.conn.Sync(path)
		synced <- err
	}()
	return synced
}

// readOwn reads n's data and stat.
func (b *Backend) readOwn(ctx context.Context, n *node) error {
	data, stat, err := b.read(ctx, n.path)
	if err == errVanished {
		return fmt.Errorf("%w: the lock node %s vanished while in line", driver.ErrUnavailable, n.path)
	}
	if err != nil {
		return err
	}
	n.data, n.version, n.stat, n.session = data, stat.Version, stat, stat.EphemeralOwner
	return nil
}

// seize records n, first in line as the request sent at sent found it, as the owner's lock
// node; confirmed is as for granted.
func (b *Backend) seize(ctx context.Context, start time.Time, k holder, n *node, sent time.Time, confirmed bool) (driver.Grant, holding, error) {
	if n.stat == nil {
		if err := b.readOwn(ctx, n); err != nil {
			return b.leave(ctx, k, n, err)
		}
	}
	h := holdingOf(n.path, n.data, n.stat, sent)
	h.crowded = n.crowded
	b.remember(k, h)
	g, err := b.granted(ctx, start, h, sent, confirmed)
	if err != nil {
		return b.leave(ctx, k, n, err)
	}
	return g, h, nil
}

// seizeSynced is seize after a wait in line, once the sync sent with the read that found n's
// turn (at sent) is answered: the grant rests on both.
func (b *Backend) seizeSynced(ctx context.Context, start time.Time, k holder, n *node, sent time.Time, synced <-chan error) (driver.Grant, holding, error) {
	var err error
	select {
	case err = <-synced:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return b.leave(ctx, k, n, classify(err))
	}
	return b.seize(ctx, start, k, n, sent, true)
}

// seizeOnCreate is seize of n on the create that made it (see standsOnCreate).
func (b *Backend) seizeOnCreate(ctx context.Context, start time.Time, k holder, n *node) (driver.Grant, holding, error) {
	return b.seize(ctx, start, k, n, n.sent, true)
}

// leaveGrace is how long a waiter whose context ended still waits for the deletion of its
// node, so that it leaves nothing in line when the server answers at once; past it, the
// deletion is owed (owed.go), and the call returns. It is a small part of the 100 ms a call
// may take past its deadline (README, "Deadlines").
const leaveGrace = 25 * time.Millisecond

// leave takes n out of line and returns cause. A waiter whose context ended still waits
// leaveGrace for it; when n cannot be removed by then, its removal is owed: a node left in
// line would reach its head and hold the lock for no one.
func (b *Backend) leave(ctx context.Context, k holder, n *node, cause error) (driver.Grant, holding, error) {
	o := owed{holder: k, hold: n.hold, guid: parseGUID(n.name), session: n.session}
	if b.conn.State() != zk.StateHasSession {
		b.owed.Owe(o, nil)
		return driver.Grant{}, holding{}, cause
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), leaveGrace)
		defer cancel()
	}
	_, err := b.releaseNode(ctx, k, n.path, n.hold, n.data, n.version, false)
	if err != nil && err != errVanished && !errors.Is(err, driver.ErrInvalid) {
		b.owed.Owe(o, inFlight(err))
		if cause == nil {
			cause = err
		}
	}
	return driver.Grant{}, holding{}, cause
}

func parseGUID(name string) string {
	e, _ := parseEntry(name)
	return e.guid
}
