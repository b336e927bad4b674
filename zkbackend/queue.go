package zkbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// await holds the lock once n is first in line. Queued, it waits for that, watching only the
// node just ahead of n, so that a release wakes one waiter, not the whole line. Not queued, it
// takes n out of line again when n is not first.
func (b *Backend) await(ctx context.Context, req fencelock.Request, n *node, queued bool) (fencelock.Grant, error) {
	k := holder{req.Name, req.Owner}
	if n.first {
		return b.take(k, n)
	}
	dir := parent(n.path)
	for {
		if err := ctx.Err(); err != nil {
			return b.leave(k, n, fmt.Errorf("fencelock/zk: left the queue of %q: %w", req.Name, err))
		}
		q, err := b.queue(dir)
		if err != nil {
			return b.leave(k, n, err)
		}
		i := position(q, n.name)
		switch {
		case i < 0:
			return fencelock.Grant{}, fmt.Errorf("%w: the lock node %s vanished while in line: its session expired, or someone deleted it", fencelock.ErrUnavailable, n.path)
		case i == 0:
			return b.take(k, n)
		}
		if n.stat == nil && queued {
			// Read n now, not when it reaches the head: its czxid never changes, and no one
			// but its owner can write to it, and only once it is first. The handoff is then
			// one round trip, as in the plain recipe.
			if err := b.readOwn(n); err != nil {
				return b.leave(k, n, err)
			}
		}

		// Watching the first node when it is the one just ahead reads its owner too.
		first := dir + "/" + q[0].name
		var watch <-chan zk.Event
		var data lockData
		var stat *zk.Stat
		if i == 1 && queued {
			var raw []byte
			raw, stat, watch, err = b.conn.GetW(first)
			if err == nil {
				if data, err = decodeData(raw); err != nil {
					err = fmt.Errorf("%w: %s: %w", fencelock.ErrInvalid, first, err)
				}
			} else if err == zk.ErrNoNode {
				err = errVanished
			}
		} else {
			data, stat, err = b.read(first)
		}
		switch {
		case err == errVanished:
			continue // released meanwhile: n may be first now
		case err != nil:
			return b.leave(k, n, classify(err))
		}
		if data.owner == req.Owner {
			// The owner holds the lock through another node: enter that one rather than wait
			// behind itself.
			g, err := b.enter(ctx, k, b.holdingOf(first, data, stat), req.Hold, true)
			if err == errVanished {
				continue
			}
			// n is surplus either way; if it cannot go now, the sweep removes it.
			_, _ = b.leave(k, n, nil)
			return g, err
		}
		if !queued {
			return b.leave(k, n, &fencelock.HeldError{Name: req.Name})
		}
		if watch == nil {
			_, _, watch, err = b.conn.GetW(dir + "/" + q[i-1].name)
			switch {
			case err == zk.ErrNoNode:
				continue // left meanwhile: look again
			case err != nil:
				return b.leave(k, n, classify(err))
			}
		}
		select {
		case ev := <-watch:
			if ev.Err != nil {
				// go-zookeeper ends watches when the session expires or the connection is
				// closed for good; n went with the session.
				return fencelock.Grant{}, fmt.Errorf("%w: waiting for %q: %w", fencelock.ErrUnavailable, req.Name, ev.Err)
			}
		case <-ctx.Done():
			// The watch stays registered until the node ahead changes: go-zookeeper cannot
			// remove it. It costs a map entry and a buffered channel, no goroutine.
			return b.leave(k, n, fmt.Errorf("fencelock/zk: left the queue of %q: %w", req.Name, ctx.Err()))
		}
	}
}

// readOwn reads n's data and stat.
func (b *Backend) readOwn(n *node) error {
	data, stat, err := b.read(n.path)
	if err == errVanished {
		return fmt.Errorf("%w: the lock node %s vanished while in line", fencelock.ErrUnavailable, n.path)
	}
	if err != nil {
		return err
	}
	n.data, n.version, n.stat = data, stat.Version, stat
	return nil
}

// take records n, first in line, as the owner's lock node.
func (b *Backend) take(k holder, n *node) (fencelock.Grant, error) {
	if n.stat == nil {
		if err := b.readOwn(n); err != nil {
			return fencelock.Grant{}, err
		}
	}
	h := b.holdingOf(n.path, n.data, n.stat)
	b.remember(k, h)
	return b.grant(h), nil
}

// leave takes n out of line and returns cause. When n cannot be removed now, it is left to the
// sweep: a node left in line would reach its head and hold the lock for no one.
func (b *Backend) leave(k holder, n *node, cause error) (fencelock.Grant, error) {
	_, err := b.releaseNode(k, n.path, n.hold, n.data, n.version, false)
	if err != nil && err != errVanished && !errors.Is(err, fencelock.ErrInvalid) {
		b.abandon(orphan{name: k.name, guid: parseGUID(n.name), owner: k.owner, hold: n.hold, session: n.session})
		if cause == nil {
			cause = err
		}
	}
	return fencelock.Grant{}, cause
}

func parseGUID(name string) string {
	e, _ := parseEntry(name)
	return e.guid
}
