package zkbackend

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/settle"
)

// CloseTimeout bounds Close: how long it waits for the work the Backend owes and for its
// goroutines.
const CloseTimeout = 2 * time.Second

// settlePoll is how often the settler looks again while the session is away. go-zookeeper
// tells of its return only on the event channel zk.Connect gave its caller, or to the callback
// given to zk.Connect: neither is the Backend's, which is handed the connection made. So this
// one wait is a clock's; the others (a write's answer, new work owed) are told.
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
// The settler (internal/settle) makes it once the session is back and the write that left it
// owed (pending) has its answer, and tries again until it is done or the node's session has
// ended. Close waits for it.
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
	session int64 // the session that owns, or would own, the node; 0: not known
}

func (o owed) of(k holder, hold string) bool { return o.holder == k && o.hold == hold }

func (o owed) same(p owed) bool { return o.of(p.holder, p.hold) && o.guid == p.guid }

// newLedger returns the ledger of what b owes, which removes nodes with b.clear.
func (b *Backend) newLedger() *settle.Ledger[owed] {
	return settle.New(settle.Config[owed]{
		Pay:     func(ctx context.Context, o *owed) (bool, <-chan struct{}) { return b.clear(ctx, *o) },
		Backoff: settleBackoff[:],
		Same:    owed.same,
		Gone:    b.gone,
		Blocked: b.noSession,
	})
}

// claim takes what is owed of k's hold away from the settler, for an acquisition of that
// hold, once none of it is being made or waits for a write. The caller gives it back with
// unclaim.
func (b *Backend) claim(ctx context.Context, k holder, hold string) ([]owed, error) {
	return b.owed.Claim(ctx, func(o owed) bool { return o.of(k, hold) }, nil)
}

// unclaim gives back what claim took. granted is the GUID of the node the acquisition was
// granted, or empty: what was owed of that node is void, and so is a removal from whichever
// node was first in line, which the grant's node is.
func (b *Backend) unclaim(taken []owed, granted string) {
	b.owed.Unclaim(taken, func(o owed) bool { return granted != "" && (o.guid == granted || o.guid == "") })
}

// noSession is the settler's Blocked: it removes nodes only through the session, and looks
// again every settlePoll while there is none. When the session is back, it lets
// settleAfterReconnect pass first: go-zookeeper v1.0.4 sends its watches again right after a
// reconnect, and a reply its receiver reads meanwhile races with that inside go-zookeeper (a
// data race the race detector reports, go-zookeeper/zk pull request 35). A removal sent the
// moment the session was back was such a reply.
func (b *Backend) noSession() time.Duration {
	if b.conn.State() != zk.StateHasSession {
		b.away = true
		return settlePoll
	}
	if b.away {
		b.away = false
		return settleAfterReconnect
	}
	return 0
}

// settleAfterReconnect is how long the settler waits after the session came back (noSession).
const settleAfterReconnect = 100 * time.Millisecond

// gone reports whether o's node ended without a removal: with its session, or with the
// connection, which was closed (see closedConn). It is the settler's Gone.
func (b *Backend) gone(o owed) bool {
	if b.closedConn() {
		return true
	}
	if o.session == 0 {
		return false
	}
	_, _, live := b.sessionOf(o.session)
	return live == endedSession
}

// closedConn reports whether the connection has stayed down for good for a second: go-zookeeper
// is then closed (it is in that state only for an instant while it reconnects), and a closed
// connection's session ends, with its nodes. It runs in the settler alone (gone), which looks
// every settlePoll while the session is away; a look after a longer gap (the settler had
// nothing to do) counts afresh, for the connection may have been back meanwhile.
func (b *Backend) closedConn() bool {
	now := time.Now()
	if b.conn.State() != zk.StateDisconnected {
		b.down = downLooks{}
		return false
	}
	if b.down.since.IsZero() || now.Sub(b.down.last) > 2*settlePoll {
		b.down.since = now
	}
	b.down.last = now
	return now.Sub(b.down.since) > time.Second
}

// downLooks are the settler's looks in a row that found the connection disconnected.
type downLooks struct {
	since time.Time // the first
	last  time.Time
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
