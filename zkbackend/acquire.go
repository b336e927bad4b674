package zkbackend

import (
	"context"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// lookTries bounds how often a call looks at a queue again after the node it meant to act on
// vanished; each retry means the lock changed hands meanwhile, so running out is unlikely.
const lookTries = 8

// Acquire implements fencelock.Backend: one attempt, which leaves no node behind when another
// owner holds the lock.
func (b *Backend) Acquire(ctx context.Context, req fencelock.Request) (fencelock.Grant, error) {
	return b.acquire(ctx, req, newGUID(), false, false)
}

// AcquireQueued implements fencelock.Queue: it takes a place in line and waits for the node
// ahead of it to go, until its node is first or ctx ends.
func (b *Backend) AcquireQueued(ctx context.Context, req fencelock.Request) (fencelock.Grant, error) {
	return b.acquire(ctx, req, newGUID(), true, false)
}

// acquire takes the lock for req, with guid naming the node it may create. unsure says an
// earlier create with this guid may have made the node (its reply was lost), as when a caller
// retries after a connection loss.
func (b *Backend) acquire(ctx context.Context, req fencelock.Request, guid string, queued, unsure bool) (fencelock.Grant, error) {
	if err := b.usable(ctx, req.Name); err != nil {
		return fencelock.Grant{}, err
	}
	b.sweep()
	k := holder{req.Name, req.Owner}
	dir := b.Path(req.Name)
	for range lookTries {
		if h, ok := b.holding(k); ok {
			if b.lost(h) {
				b.forget(k, h.path)
			} else if g, err := b.enter(ctx, k, h, req.Hold, false); err != errVanished {
				return g, err
			}
		}
		if !queued {
			// Look before joining: a held lock then costs a read, not a node made and deleted.
			q, err := b.queue(dir)
			if err != nil {
				return fencelock.Grant{}, err
			}
			if len(q) > 0 {
				g, err := b.enterFirst(ctx, k, dir+"/"+q[0].name, req)
				if err == errVanished {
					continue
				}
				return g, err
			}
		}
		n, err := b.join(ctx, req, guid, unsure)
		if err != nil {
			return fencelock.Grant{}, err
		}
		return b.await(ctx, req, n, queued)
	}
	return fencelock.Grant{}, fmt.Errorf("%w: %q changed hands %d times while being acquired", fencelock.ErrUnavailable, req.Name, lookTries)
}

// enterFirst re-enters the lock node at path, first in line, when req's owner holds it.
func (b *Backend) enterFirst(ctx context.Context, k holder, path string, req fencelock.Request) (fencelock.Grant, error) {
	data, stat, err := b.read(path)
	if err != nil {
		return fencelock.Grant{}, err
	}
	if data.owner != req.Owner {
		return fencelock.Grant{}, &fencelock.HeldError{Name: req.Name}
	}
	return b.enter(ctx, k, b.holdingOf(path, data, stat), req.Hold, true)
}

// enter adds hold to the owner's lock node h. fresh says h was just read from the server; a
// cached copy that already has hold is read again before it is believed. It returns
// errVanished when the node is gone.
func (b *Backend) enter(ctx context.Context, k holder, h holding, hold string, fresh bool) (fencelock.Grant, error) {
	for {
		if err := ctx.Err(); err != nil {
			return fencelock.Grant{}, err
		}
		if h.data.has(hold) && fresh {
			// A retried acquire whose first attempt got through: it does not count twice.
			b.remember(k, h)
			return b.grant(h), nil
		}
		var err error
		if !h.data.has(hold) {
			next := h.data.with(hold)
			var stat *zk.Stat
			if stat, err = b.conn.Set(h.path, next.encode(), h.version); err == nil {
				h.data, h.version = next, stat.Version
				b.remember(k, h)
				return b.grant(h), nil
			}
		}
		switch err {
		case nil, zk.ErrBadVersion:
			data, stat, rerr := b.read(h.path)
			if rerr != nil {
				if rerr == errVanished {
					b.forget(k, h.path)
				}
				return fencelock.Grant{}, rerr
			}
			h.data, h.version, fresh = data, stat.Version, true
		case zk.ErrNoNode:
			b.forget(k, h.path)
			return fencelock.Grant{}, errVanished
		default:
			return fencelock.Grant{}, classify(err)
		}
	}
}
