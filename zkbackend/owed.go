package zkbackend

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// CloseTimeout bounds Close: how long it waits for the work the Backend owes and for its
// goroutines.
const CloseTimeout = 2 * time.Second

// settlePoll is how often the settler looks again while it waits: for the session to come
// back, for a write to have its answer, for an acquisition of the same hold to end.
const settlePoll = 50 * time.Millisecond

// settleBackoff spaces the settler's attempts at one piece of work that keeps failing.
var settleBackoff = [...]time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second}

// owed is the removal of hold from a lock node that this Backend could not confirm: from the
// node named by guid, or, with guid empty, from the owner's node first in line. Left undone,
// the node would hold the lock, or a place in line, for no one as long as its session lasts —
// as long as the process lives, when go-zookeeper reconnects within the session. It comes from
//
//   - a release whose outcome is unknown: the connection was down, or the call's deadline
//     passed first;
//   - a waiter's leaving the line that failed, or was cut short by the deadline;
//   - a create whose reply was lost, and whose node could not be looked for.
//
// The settler, a goroutine of the Backend's, makes it once the session is back and the write
// that left it owed (pending) has its answer, and tries again until it is done or the node's
// session has ended. Close waits for it.
//
// An acquisition of the same hold — the retry of one whose outcome was lost; no other
// acquisition has its hold ID — takes what is owed of that hold out of the settler's hands
// while it runs (claim), once no removal of it is in progress or in flight. It looks for the
// nodes named there before it makes one (an earlier attempt's node may be in line already),
// and once granted, what was owed of the node it holds is void: owed work never touches a
// node a later grant adopted. Removals of other holds in the same node are left alone: each
// takes out its own hold only.
type owed struct {
	holder  // the lock's or permit's, and its owner
	hold    string
	guid    string
	session int64           // the session that owns, or would own, the node; 0: not known
	pending <-chan struct{} // closed once the write that left this owed has its answer
}

func (o owed) of(k holder, hold string) bool { return o.holder == k && o.hold == hold }

func (o owed) same(p owed) bool { return o.of(p.holder, p.hold) && o.guid == p.guid }

func (o owed) waiting() bool {
	if o.pending == nil {
		return false
	}
	select {
	case <-o.pending:
		return false
	default:
		return true
	}
}

func (b *Backend) owe(o owed) {
	b.mu.Lock()
	// One removal waits for the other's write too, unless both have writes in flight.
	i := slices.IndexFunc(b.owed, func(p owed) bool { return p.same(o) && (o.pending == nil || p.pending == o.pending || !p.waiting()) })
	if i < 0 {
		b.owed = append(b.owed, o)
	} else if o.pending != nil {
		b.owed[i].pending = o.pending
	}
	b.mu.Unlock()
	b.settleSoon()
}

// claim takes what is owed of k's hold away from the settler, for an acquisition of that
// hold, once none of it is being made or waits for a write. The caller gives it back with
// unclaim.
func (b *Backend) claim(ctx context.Context, k holder, hold string) ([]owed, error) {
	for {
		b.mu.Lock()
		var busy <-chan struct{}
		if s := b.settlingNow; s != nil && s.of(k, hold) {
			busy = b.settled
		}
		for _, o := range b.owed {
			if o.of(k, hold) && o.waiting() {
				busy = o.pending
			}
		}
		if busy == nil {
			var taken []owed
			b.owed = slices.DeleteFunc(b.owed, func(o owed) bool {
				if o.of(k, hold) {
					taken = append(taken, o)
					return true
				}
				return false
			})
			b.mu.Unlock()
			return taken, nil
		}
		b.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// unclaim gives back what claim took. granted is the GUID of the node the acquisition was
// granted, or empty: what was owed of that node is void, and so is a removal from whichever
// node was first in line, which the grant's node is.
func (b *Backend) unclaim(taken []owed, granted string) {
	if granted != "" {
		taken = slices.DeleteFunc(taken, func(o owed) bool { return o.guid == granted || o.guid == "" })
	}
	if len(taken) == 0 {
		return
	}
	b.mu.Lock()
	b.owed = append(b.owed, taken...)
	b.mu.Unlock()
	b.settleSoon()
}

// settleSoon starts the settler unless it runs, or nothing is owed.
func (b *Backend) settleSoon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.settling || len(b.owed) == 0 || b.ctx.Err() != nil {
		return
	}
	b.settling = true
	b.flights.start()
	go b.settle()
}

type settleStep int

const (
	settleNext settleStep = iota // make the removal returned
	settleWait                   // nothing can be made now: look again soon
	settleDone                   // nothing owed, or the Backend closed
)

// settle makes what is owed, one removal at a time, until nothing is.
func (b *Backend) settle() {
	defer b.flights.end()
	failures := 0
	var disconnected time.Time // since when the connection has been down for good, it seems
	for {
		o, step := b.nextOwed()
		switch step {
		case settleDone:
			return
		case settleWait:
			disconnected = b.closedConn(disconnected)
			b.pause(settlePoll)
			continue
		}
		disconnected = time.Time{}
		done, pending := b.clear(b.ctx, o)
		b.finish(o, done, pending)
		if done {
			failures = 0
			continue
		}
		b.pause(settleBackoff[min(failures, len(settleBackoff)-1)])
		failures++
	}
}

// closedConn drops everything owed once the connection has stayed down for good for a
// second: go-zookeeper is then closed (it is in that state only for an instant while it
// reconnects), and a closed connection's session ends, with its nodes. since is when the
// settler first saw it so, or zero.
func (b *Backend) closedConn(since time.Time) time.Time {
	if b.conn.State() != zk.StateDisconnected {
		return time.Time{}
	}
	if since.IsZero() {
		return time.Now()
	}
	if time.Since(since) > time.Second {
		b.mu.Lock()
		b.owed = nil
		b.mu.Unlock()
	}
	return since
}

// pause sleeps d, or until the Backend closes.
func (b *Backend) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
	}
}

// nextOwed takes the first removal that can be made now and marks it as the one in progress.
func (b *Backend) nextOwed() (owed, settleStep) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.owed = slices.DeleteFunc(b.owed, b.gone)
	if len(b.owed) == 0 || b.ctx.Err() != nil {
		b.settling = false
		return owed{}, settleDone
	}
	if b.conn.State() != zk.StateHasSession {
		return owed{}, settleWait
	}
	for i, o := range b.owed {
		if !o.waiting() {
			b.owed = slices.Delete(b.owed, i, i+1)
			b.settlingNow, b.settled = &o, make(chan struct{})
			return o, settleNext
		}
	}
	return owed{}, settleWait
}

// gone reports whether o's node ended with its session. b.mu is held.
func (b *Backend) gone(o owed) bool {
	if o.session == 0 {
		return false
	}
	_, _, live := b.sessionOf(o.session)
	return live == endedSession
}

// finish ends the removal in progress: kept for another attempt unless done.
func (b *Backend) finish(o owed, done bool, pending <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !done {
		if pending != nil {
			o.pending = pending
		}
		b.owed = append(b.owed, o)
	}
	b.settlingNow = nil
	close(b.settled)
}

// clear removes o's hold from its node, which deletes the node unless another hold is in it.
// It reports whether nothing is owed any more, and, when not, the write it left in flight.
func (b *Backend) clear(ctx context.Context, o owed) (bool, <-chan struct{}) {
	dir := b.Path(o.name)
	if o.permit && o.guid == "" {
		h, err := b.permitOf(ctx, o.holder, o.hold)
		if err != nil {
			return errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrInvalid), nil
		}
		o.guid = h.guid()
	}
	var q []entry
	var err error
	if o.permit {
		q, err = b.permits(ctx, dir, false)
	} else {
		q, err = b.queue(ctx, dir)
	}
	if err != nil {
		return false, nil
	}
	var e entry
	var ok bool
	if o.guid == "" {
		e, ok = first(q)
	} else {
		e, ok = findGUID(q, o.guid)
	}
	if !ok {
		return true, nil
	}
	path := dir + "/" + e.name
	data, stat, err := b.read(ctx, path)
	switch {
	case err == errVanished:
		return true, nil
	case err != nil:
		return errors.Is(err, driver.ErrInvalid), nil
	case data.owner != o.owner:
		return true, nil // first in line is another owner: the release has nothing to act on
	}
	_, err = b.releaseNode(ctx, o.holder, path, o.hold, data, stat.Version, true)
	return err == nil || err == errVanished || errors.Is(err, driver.ErrInvalid), inFlight(err)
}

func first(q []entry) (entry, bool) {
	if len(q) == 0 {
		return entry{}, false
	}
	return q[0], true
}
