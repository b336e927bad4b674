package zkbackend

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// A session ends for good in two ways its client can know of: the user closes the connection
// (go-zookeeper tells the server, which ends the session and deletes its nodes at once, so the
// next waiter holds the lock at once), or go-zookeeper, reconnecting, learns that the server
// expired it. Either way go-zookeeper ends every watch of the connection, with zk.ErrClosing
// or zk.ErrSessionExpired, and a watch is the only way it tells: a closed connection answers
// every request as a dropped one does, with zk.ErrConnectionClosed. So a Backend keeps a watch
// on each session of its connection, from its first call under it, and every hold of that
// session ends the moment the watch says the session has: renewals report
// driver.ErrNotHeld, and the Client, which asks the Backend to push word of a loss
// (driver.LossWatcher), ends the holds' contexts at once. A disconnect ends no watch:
// go-zookeeper sets them again on reconnecting, and a disconnect is no loss.
//
// The watch is of endAnchor, which the server keeps and never changes, so that it fires for
// nothing else. A grant waits until it is set: a close after the grant then always ends a
// watch that is in place.
const endAnchor = "/zookeeper"

// sessionEnd is the watch of one session's end.
//
// Locking: mu guards cause, ended and losers; set and done are closed under it.
type sessionEnd struct {
	session int64
	set     chan struct{} // closed once the watch is set, or could not be
	done    chan struct{} // closed once the watch is no longer kept: cause says whether the session ended

	mu     sync.Mutex
	cause  error // why the session ended, matching driver.ErrNotHeld; nil while it lives, or when not known
	ended  bool  // done is closed
	isSet  bool  // set is closed
	losers map[*loser]struct{}
}

// loser is one hold whose holder asked for word of its loss (WatchLoss).
type loser struct {
	lost func(error)
}

func newSessionEnd(session int64) *sessionEnd {
	return &sessionEnd{session: session, set: make(chan struct{}), done: make(chan struct{}), losers: make(map[*loser]struct{})}
}

// watchEnd returns the watch of the end of session, the connection's current one, and starts
// one when there is none or the last one was not kept for a reason other than the session's
// end (it could not be set, or the Backend closed). fresh says it started one.
func (b *Backend) watchEnd(session int64) (e *sessionEnd, fresh bool) {
	for {
		old := b.end.Load()
		if old != nil && old.session == session && !old.unkept() {
			return old, false
		}
		e = newSessionEnd(session)
		if b.ctx.Err() != nil {
			e.finish(nil) // closed: nothing is watched any more
			return e, false
		}
		if b.end.CompareAndSwap(old, e) {
			b.flights.start()
			go b.keepEnd(e)
			return e, true
		}
	}
}

// keepEnd sets the watch of e's session's end, and waits for it to fire, or for the Backend
// to close.
func (b *Backend) keepEnd(e *sessionEnd) {
	defer b.flights.end()
	for {
		w, err := run(b, b.ctx, func() (<-chan zk.Event, error) {
			_, _, w, err := b.conn.ExistsW(endAnchor)
			return w, err
		})
		switch {
		case err != nil:
			e.finish(endCause(e.session, err))
			return
		case b.conn.SessionID() != e.session:
			// Set under the session that followed: e's expired meanwhile.
			e.finish(endCause(e.session, zk.ErrSessionExpired))
			return
		}
		e.markSet()
		select {
		case ev := <-w:
			if ev.Err != nil {
				e.finish(endCause(e.session, ev.Err))
				return
			}
			// The anchor changed, which the server never does on its own: set it again.
		case <-b.ctx.Done():
			e.finish(nil)
			return
		}
	}
}

// endCause says how the session ended, when err tells it did; nil when it does not.
func endCause(session int64, err error) error {
	switch err {
	case zk.ErrClosing:
		return fmt.Errorf("%w: the ZooKeeper connection was closed, which ended its session 0x%x and the lock nodes it owned", driver.ErrNotHeld, session)
	case zk.ErrSessionExpired:
		return fmt.Errorf("%w: ZooKeeper session 0x%x expired, and the server deleted the lock nodes it owned", driver.ErrNotHeld, session)
	}
	return nil
}

func (e *sessionEnd) markSet() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.isSet {
		e.isSet = true
		close(e.set)
	}
}

// finish ends the watch, with cause when the session ended, and tells every loser of it.
func (e *sessionEnd) finish(cause error) {
	e.mu.Lock()
	if !e.isSet {
		e.isSet = true
		close(e.set)
	}
	e.cause, e.ended = cause, true
	close(e.done)
	losers := e.losers
	e.losers = nil
	e.mu.Unlock()
	if cause == nil {
		return // not known to have ended: the renewals tell
	}
	for l := range losers {
		l.lost(cause)
	}
}

// endedWith returns why the session ended, or nil while it is not known to have.
func (e *sessionEnd) endedWith() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cause
}

// unkept reports whether the watch is no longer kept, though the session is not known to
// have ended.
func (e *sessionEnd) unkept() bool {
	select {
	case <-e.done:
	default:
		return false // kept: as every call asks, it costs no lock
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended && e.cause == nil
}

// subscribe adds lost to what e calls when the session ends, and returns the stop that takes
// it out. When the session has ended already, b calls lost at once, from a goroutine of its
// own; when e is no longer kept, nothing calls it: the renewals tell.
func (e *sessionEnd) subscribe(b *Backend, lost func(error)) (stop func()) {
	l := &loser{lost: lost}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.cause != nil:
		cause := e.cause
		b.flights.start()
		go func() {
			defer b.flights.end()
			lost(cause)
		}()
		return func() {}
	case e.ended:
		return func() {}
	}
	e.losers[l] = struct{}{}
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.losers, l)
	}
}

// endWatched waits until the end of b's current session is watched, so that a grant under it
// is never held past an end the Backend is not told of. It fails when the session has ended,
// or when the watch cannot be set.
func (b *Backend) endWatched(ctx context.Context) error {
	for try := 0; ; try++ {
		if b.ctx.Err() != nil {
			// Closed: no watch is kept any more, nor started.
			return fmt.Errorf("%w: the ZooKeeper backend was closed", driver.ErrClosed)
		}
		e, _ := b.watchEnd(b.conn.SessionID())
		select {
		case <-e.set:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
		cause, kept := e.cause, !e.ended || e.cause != nil
		e.mu.Unlock()
		switch {
		case cause != nil:
			return fmt.Errorf("%w: %v", driver.ErrUnavailable, cause) // not ErrNotHeld: this is no hold yet
		case kept:
			return nil
		case try > 0:
			return fmt.Errorf("%w: the end of ZooKeeper session 0x%x cannot be watched: the connection is down", driver.ErrUnavailable, e.session)
		}
	}
}

// WatchLoss implements driver.LossWatcher: it tells of the end of the session that owns the
// lease's lock node (see endAnchor) — the connection closed, or the session expired. A node
// deleted otherwise (ForceRelease, an operator) is learnt from the renewals.
func (b *Backend) WatchLoss(lease driver.Lease, lost func(error)) (stop func()) {
	if b == nil || b.err != nil || b.closed.Load() {
		return func() {}
	}
	h, ok := b.holding(keyOf(lease.Name, lease.Owner, lease.Limit))
	if !ok || h.token != lease.Token {
		return func() {} // not known here: the renewals tell
	}
	e := b.endOf(h.session)
	if e == nil {
		return func() {}
	}
	return e.subscribe(b, lost)
}
