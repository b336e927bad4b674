package zkbackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// lockLine is a lock's line to a waiter in it, n: n holds the lock once it is first in line.
// Queued, it waits for that, watching only the node just ahead of n, so that a release wakes
// one waiter, not the whole line. Not queued, it leaves when n is not first.
type lockLine struct {
	b      *Backend
	req    driver.Request
	n      *node
	queued bool
}

func (l *lockLine) list(ctx context.Context, dir string) ([]entry, error) {
	return l.b.queue(ctx, dir)
}

func (l *lockLine) gone([]entry) error {
	return fmt.Errorf("%w: the lock node %s vanished while in line: its session expired, or someone deleted it", driver.ErrUnavailable, l.n.path)
}

func (l *lockLine) left(err error) error {
	return fmt.Errorf("fencelock/zk: left the queue of %q: %w", l.req.Name, err)
}

// look says hold when n is first, and wait otherwise. The node first in line, which may be the
// owner's to enter, is wait's to read: a waiter behind another node tells its request it waits
// before that read, as a lock's waiter always has, owner's node or not.
func (l *lockLine) look(ctx context.Context, q []entry, i int) (step, error) {
	if i == 0 {
		return step{next: stepHold}, nil
	}
	if l.n.stat == nil && l.queued {
		// Read n now, not when it reaches the head: its czxid never changes, and no one
		// but its owner can write to it, and only once it is first.
		if err := l.b.readOwn(ctx, l.n); err != nil {
			return step{}, err
		}
	}
	return step{next: stepWait}, nil
}

// wait reads the node first in line (see ahead) and, queued and not the owner's, waits for the
// node just ahead of n to change.
func (l *lockLine) wait(ctx context.Context, q []entry, i int) (step, error) {
	dir := parent(l.n.path)
	head, err := l.b.ahead(ctx, dir, q, i, l.req, l.queued)
	switch {
	case err == errVanished:
		return step{next: stepAgain}, nil // released meanwhile: n may be first now
	case err != nil:
		return step{}, classify(err)
	case head.mine:
		// The owner holds the lock through another node: enter that one rather than wait
		// behind itself.
		return step{next: stepEnter, owner: head.holding}, nil
	case !l.queued:
		return step{next: stepRefuse}, nil
	}
	deleted, err := l.b.waitTurn(ctx, l.req.Name, dir+"/"+q[i-1].name, head.watch, head.turn)
	switch {
	case err != nil:
		return step{}, err
	case deleted && i == 1 && l.b.standsOnCreate(l.n):
		// The only node ahead is gone, and none made since stands before n: n is first,
		// with no read to say so — a round trip off every owner change.
		l.n.crowded = len(q) > 2
		return step{next: stepHoldOnCreate}, nil
	}
	return step{next: stepAgain}, nil
}

// firstInLine is what a waiter knows of the node first in line.
type firstInLine struct {
	holding
	mine  bool            // the waiter's owner holds the lock through it, and it can vouch for it
	watch <-chan zk.Event // set when that node is just ahead of the waiter
	turn  <-chan zk.Event // set when a node of the owner's stands between them (see ahead)
}

// ahead reads the node first in line; when it is just ahead of the waiter (at i), with a
// watch, which saves a request.
//
// When a node that may be the owner's stands between the first one and the waiter, ahead
// watches the first one too (turn): once that node comes first, the owner holds the lock and
// the waiter enters its node, as a later acquisition of the owner would, rather than wait
// behind its own owner. That node does not change when it comes first; the going of the
// node first in line is what tells.
func (b *Backend) ahead(ctx context.Context, dir string, q []entry, i int, req driver.Request, queued bool) (firstInLine, error) {
	path := dir + "/" + q[0].name
	sent := time.Now()
	var f firstInLine
	var data lockData
	var stat *zk.Stat
	var err error
	watch := queued && (i == 1 || ownersAmong(q[1:i], req.Owner))
	if !watch && i > 1 && !q[0].mayBeOwners(req.Owner) {
		// Not the owner's node, by its name: nothing to read. A node of a client that named its
		// nodes otherwise may be the owner's all the same; that client is another process's
		// (see newGUIDFor), whose node is another holder's to this one anyway.
		return f, nil
	}
	if watch {
		var raw []byte
		var w <-chan zk.Event
		raw, stat, w, err = b.getW(ctx, path)
		switch {
		case err == zk.ErrNoNode:
			return f, errVanished
		case err != nil:
			return f, err
		}
		if i == 1 {
			f.watch = w
		} else {
			f.turn = w
		}
		if data, err = decodeData(raw); err != nil {
			return f, fmt.Errorf("%w: %s: %w", driver.ErrInvalid, path, err)
		}
	} else if data, stat, err = b.read(ctx, path); err != nil {
		return f, err
	}
	f.holding = holdingOf(path, data, stat, sent)
	// A node of a session this Backend cannot vouch for is another holder's to it, owner or
	// not (see sessions.go).
	f.mine = data.owner == req.Owner && b.vouchable(stat.EphemeralOwner)
	return f, nil
}

// ownersAmong reports whether one of the nodes q may be owner's, by its name.
func ownersAmong(q []entry, owner string) bool {
	return slices.ContainsFunc(q, func(e entry) bool { return e.mayBeOwners(owner) })
}

// waitTurn waits for the node just ahead of a waiter to change, with watch when the caller has
// one on it, or for turn, when set, to fire. It reports whether the watch told of that node's
// deletion.
func (b *Backend) waitTurn(ctx context.Context, name, ahead string, watch, turn <-chan zk.Event) (bool, error) {
	if watch == nil {
		_, _, w, err := b.getW(ctx, ahead)
		switch {
		case err == zk.ErrNoNode:
			return false, nil // left meanwhile: look again
		case err != nil:
			return false, classify(err)
		}
		watch = w
	}
	select {
	case ev := <-watch:
		return ev.Type == zk.EventNodeDeleted, watchEnded(name, ev)
	case ev := <-turn:
		return false, watchEnded(name, ev) // the node first in line changed: look again
	case <-ctx.Done():
		// The watch stays registered until the node ahead changes: go-zookeeper cannot
		// remove it. It costs a map entry and a buffered channel, no goroutine.
		return false, fmt.Errorf("fencelock/zk: left the queue of %q: %w", name, ctx.Err())
	}
}

// watchEnded says why go-zookeeper sent ev to a waiter's watch, when not for a change of what
// it watches: the session expired, or the connection was closed for good, and the waiter's
// node went with the session.
func watchEnded(name string, ev zk.Event) error {
	if ev.Err == nil {
		return nil
	}
	return fmt.Errorf("%w: waiting for %q: %w: %w", driver.ErrUnavailable, name, errSessionGone, ev.Err)
}
