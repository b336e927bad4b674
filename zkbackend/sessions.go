package zkbackend

import (
	"context"
	"fmt"
	"sync"
	"time"
	"weak"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// A lock node is an ephemeral of the session that made it and lives as long as that session.
// The server keeps a session at least its timeout after it last heard from the session's
// client; whether it heard from another client lately, no one else can know. So a Backend
// vouches for a node only through the session that owns it: its own, by asking through its
// own connection, or another Backend's of this process (WithOwner across Backends), by asking
// through that Backend's connection. A node of a session of another process it cannot vouch
// for at all: such a node is another holder's to it.
//
// sessions knows the sessions of this process's Backends by ID. It holds their connections
// weakly: a connection no one uses any more is forgotten.
var sessions struct {
	mu   sync.Mutex
	byID map[int64]sessionConn
}

type sessionConn struct {
	conn    weak.Pointer[zk.Conn]
	timeout time.Duration // the least that the Backends on conn said it was granted
	end     *sessionEnd   // the watch of its end a Backend on conn keeps (end.go)
}

// register records b's connection under its current session, and has b watch for that
// session's end (end.go).
func (b *Backend) register() {
	id := b.conn.SessionID()
	if id == 0 {
		return
	}
	end, fresh := b.watchEnd(id)
	if !fresh && b.registered.Load() == id {
		return
	}
	sessions.mu.Lock()
	defer sessions.mu.Unlock()
	if sessions.byID == nil {
		sessions.byID = make(map[int64]sessionConn)
	}
	for id, s := range sessions.byID {
		if s.conn.Value() == nil {
			delete(sessions.byID, id)
		}
	}
	s, ok := sessions.byID[id]
	if ok && s.conn.Value() == b.conn {
		s.timeout = min(s.timeout, b.validity)
		s.end = end
	} else {
		s = sessionConn{conn: weak.Make(b.conn), timeout: b.validity, end: end}
	}
	sessions.byID[id] = s
	b.registered.Store(id)
}

// liveness is what this process knows of a session.
type liveness int

const (
	unknownSession liveness = iota // not a session of this process, as far as it knows
	liveSession                    // a session of this process's, its connection still on it
	endedSession                   // it expired, or its connection was closed (end.go)
)

// sessionOf returns the connection of session id and the session's timeout, when it is a
// live session of this process.
func (b *Backend) sessionOf(id int64) (*zk.Conn, time.Duration, liveness) {
	if id != 0 && id == b.conn.SessionID() {
		if e := b.end.Load(); e != nil && e.session == id && e.endedWith() != nil {
			return nil, 0, endedSession
		}
		return b.conn, b.validity, liveSession
	}
	sessions.mu.Lock()
	s, ok := sessions.byID[id]
	sessions.mu.Unlock()
	if !ok {
		return nil, 0, unknownSession
	}
	conn := s.conn.Value()
	switch {
	case conn == nil:
		return nil, 0, unknownSession
	case conn.SessionID() != id:
		// go-zookeeper takes a new session only when the server said the old one expired.
		return nil, 0, endedSession
	case s.end != nil && s.end.endedWith() != nil:
		return nil, 0, endedSession
	}
	return conn, s.timeout, liveSession
}

// endOf returns the watch of the end of session id, when this process keeps one.
func (b *Backend) endOf(id int64) *sessionEnd {
	if e := b.end.Load(); e != nil && e.session == id {
		return e
	}
	sessions.mu.Lock()
	defer sessions.mu.Unlock()
	if s, ok := sessions.byID[id]; ok && s.end != nil && s.end.session == id {
		return s.end
	}
	return nil
}

// vouchable reports whether b can vouch for a node of session id.
func (b *Backend) vouchable(id int64) bool {
	_, _, live := b.sessionOf(id)
	return live == liveSession
}

// witness confirms, through the connection of the session that owns the lock node h, that
// the node exists and the session lives, and returns the send of that confirmation and how
// long after it the server keeps the session. synced, when not nil, holds the one sync per
// connection of a Renew call, whose send is then the confirmation's.
//
// It syncs the connection's server with the leader before it reads: a follower cut off from
// the leader goes on answering reads from its own copy until it gives the leader up
// (syncLimit ticks), while the leader may have expired the session meanwhile; a sync it
// cannot pass on fails instead.
func (b *Backend) witness(ctx context.Context, h holding, synced *syncs) (time.Time, time.Duration, error) {
	conn, keep, live := b.sessionOf(h.session)
	switch live {
	case endedSession:
		return time.Time{}, 0, fmt.Errorf("%w: the ZooKeeper session that owned the lock node %s ended", driver.ErrNotHeld, h.path)
	case unknownSession:
		return time.Time{}, 0, fmt.Errorf("%w: the lock node %s belongs to ZooKeeper session 0x%x of another process, which this one cannot vouch for", driver.ErrNotHeld, h.path, h.session)
	}
	if s := conn.State(); s != zk.StateHasSession {
		return time.Time{}, 0, fmt.Errorf("%w: no ZooKeeper session (connection %v)", driver.ErrUnavailable, s)
	}
	sent, err := b.syncOnce(ctx, conn, h.path, synced)
	if err != nil {
		return time.Time{}, 0, err
	}
	ok, stat, err := b.exists(ctx, conn, h.path)
	switch {
	case err != nil:
		return time.Time{}, 0, classify(err)
	case conn.SessionID() != h.session:
		return time.Time{}, 0, fmt.Errorf("%w: the ZooKeeper session that owned the lock node %s expired", driver.ErrNotHeld, h.path)
	case !ok || stat.EphemeralOwner != h.session:
		return time.Time{}, 0, errVanished
	}
	return sent, keep, nil
}

// syncOnce syncs conn's server with the leader, through path, and returns the sync's send;
// with synced, only the first caller per connection syncs, the others wait for its answer
// (which comes by the first's deadline: run returns then).
func (b *Backend) syncOnce(ctx context.Context, conn *zk.Conn, path string, synced *syncs) (time.Time, error) {
	if synced == nil {
		sent := time.Now()
		return sent, b.syncPath(ctx, conn, path)
	}
	c, first := synced.of(conn)
	if first {
		c.sent = time.Now()
		c.err = b.syncPath(ctx, conn, path)
		close(c.done)
	}
	<-c.done
	return c.sent, c.err
}

// syncPath is sync, where a path that is not there is no failure: the sync went through.
func (b *Backend) syncPath(ctx context.Context, conn *zk.Conn, path string) error {
	if err := b.sync(ctx, conn, path); err != nil && err != zk.ErrNoNode {
		return classify(err)
	}
	return nil
}
