package zkbackend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// lookTries bounds how often a call looks at a queue again after the node it meant to act on
// vanished; each retry means the lock changed hands meanwhile, so running out is unlikely.
const lookTries = 8

// Acquire implements driver.Backend: one attempt, which leaves no node behind when another
// owner holds the lock.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return b.acquire(ctx, req, newGUIDFor(req.Owner), false, false)
}

// AcquireQueued implements driver.Queue: it takes a place in line and waits for the node
// ahead of it to go, until its node is first or ctx ends.
func (b *Backend) AcquireQueued(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return b.acquire(ctx, req, newGUIDFor(req.Owner), true, false)
}

// acquire takes the lock for req, with guid naming the node it may create. unsure says an
// earlier create with this guid may have made the node (its reply was lost), as when a caller
// retries after a connection loss.
func (b *Backend) acquire(ctx context.Context, req driver.Request, guid string, queued, unsure bool) (driver.Grant, error) {
	if err := b.usable(ctx, req.Name); err != nil {
		return driver.Grant{}, err
	}
	start := time.Now()
	k := keyOf(req.Name, req.Owner, req.Limit)
	// The retry of an acquisition whose outcome was lost may find that attempt's node and
	// take it back: no removal owed of its hold may run meanwhile, or after.
	taken, err := b.claim(ctx, k, req.Hold)
	if err != nil {
		return driver.Grant{}, err
	}
	left := taken
	if unsure {
		left = slices.Concat(taken, []owed{{holder: k, hold: req.Hold, guid: guid}})
	}
	g, h, err := b.attempt(ctx, start, req, guid, queued, left)
	granted := ""
	if err == nil {
		granted = h.guid()
	}
	b.unclaim(taken, granted)
	return g, err
}

// attempt is acquire once the hold is claimed. left lists the nodes earlier attempts of the same
// hold may have left in line.
func (b *Backend) attempt(ctx context.Context, start time.Time, req driver.Request, guid string, queued bool, left []owed) (driver.Grant, holding, error) {
	if req.Limit > 0 {
		return b.attemptPermit(ctx, start, req, guid, queued, left)
	}
	k := keyOf(req.Name, req.Owner, 0)
	dir := b.Path(req.Name)
	for range lookTries {
		if g, h, err := b.enterHeld(ctx, start, k, req); err != errVanished {
			return g, h, err
		}
		if !queued {
			// Look before joining: a held lock then costs a read, not a node made and deleted.
			q, err := b.queue(ctx, dir)
			if err != nil {
				return driver.Grant{}, holding{}, err
			}
			if len(q) > 0 {
				g, h, err := b.enterFirst(ctx, start, k, dir+"/"+q[0].name, req)
				if err == errVanished {
					continue
				}
				return g, h, err
			}
		}
		n, err := b.join(ctx, req, guid, left)
		if err != nil {
			return driver.Grant{}, holding{}, err
		}
		return b.await(ctx, start, req, n, &lockLine{b: b, req: req, n: n, queued: queued})
	}
	return driver.Grant{}, holding{}, fmt.Errorf("%w: %q changed hands %d times while being acquired", driver.ErrUnavailable, req.Name, lookTries)
}

// enterHeld adds req's hold to the node through which this Backend holds k already, when it
// still can vouch for it. It returns errVanished when there is no such node.
func (b *Backend) enterHeld(ctx context.Context, start time.Time, k holder, req driver.Request) (driver.Grant, holding, error) {
	h, ok := b.holding(k)
	if !ok {
		return driver.Grant{}, holding{}, errVanished
	}
	if b.lost(h) || !b.vouchable(h.session) {
		b.forget(k, h.path)
		return driver.Grant{}, holding{}, errVanished
	}
	return b.enter(ctx, start, k, h, req, false)
}

// sameTerms says why req may not enter a permit node with data: another limit, or more permits
// than the node takes, which would let it grow past what the nodes behind it counted on.
func sameTerms(req driver.Request, data lockData) error {
	switch {
	case data.limit == 0:
		return nil
	case data.limit != req.Limit:
		return &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: data.limit}
	case max(req.Weight, 1) > data.weight():
		return fmt.Errorf("%w: %q: this owner holds %d permits and asks for %d", driver.ErrUpgrade, req.Name, data.weight(), max(req.Weight, 1))
	}
	return nil
}

// enterFirst re-enters the lock node at path, first in line, when req's owner holds it
// through a session this Backend can vouch for.
func (b *Backend) enterFirst(ctx context.Context, start time.Time, k holder, path string, req driver.Request) (driver.Grant, holding, error) {
	sent := time.Now()
	data, stat, err := b.read(ctx, path)
	if err != nil {
		return driver.Grant{}, holding{}, err
	}
	if data.owner != req.Owner || !b.vouchable(stat.EphemeralOwner) {
		return driver.Grant{}, holding{}, &driver.HeldError{Name: req.Name}
	}
	return b.enter(ctx, start, k, holdingOf(path, data, stat, sent), req, true)
}

// enter adds req's hold to the owner's lock or permit node h. fresh says h was just read from
// the server; a cached copy that already has the hold is read again before it is believed. It
// returns errVanished when the node is gone.
func (b *Backend) enter(ctx context.Context, start time.Time, k holder, h holding, req driver.Request, fresh bool) (driver.Grant, holding, error) {
	hold := req.Hold
	for {
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, holding{}, err
		}
		if err := sameTerms(req, h.data); err != nil && !h.data.has(hold) {
			return driver.Grant{}, holding{}, err
		}
		if h.data.has(hold) && fresh {
			// A retried acquire whose first attempt got through: it does not count twice.
			b.remember(k, h)
			g, err := b.granted(ctx, start, h, h.read, false)
			return g, h, err
		}
		var err error
		if !h.data.has(hold) {
			next := h.data.with(hold, req.Weight)
			sent := time.Now()
			var stat *zk.Stat
			if stat, err = b.set(ctx, h.path, next.encode(), h.version); err == nil {
				h.data, h.version = next, stat.Version
				b.remember(k, h)
				g, err := b.granted(ctx, start, h, sent, true)
				return g, h, err
			}
			if p := inFlight(err); p != nil {
				// The hold may be added yet: its removal is owed once the write is answered.
				b.owed.Owe(owed{holder: k, hold: hold, guid: h.guid(), session: h.session}, p)
				return driver.Grant{}, holding{}, err
			}
		}
		switch err {
		case nil, zk.ErrBadVersion:
			sent := time.Now()
			data, stat, rerr := b.read(ctx, h.path)
			if rerr != nil {
				if rerr == errVanished {
					b.forget(k, h.path)
				}
				return driver.Grant{}, holding{}, rerr
			}
			h.data, h.version, h.read, fresh = data, stat.Version, sent, true
		case zk.ErrNoNode:
			b.forget(k, h.path)
			return driver.Grant{}, holding{}, errVanished
		default:
			return driver.Grant{}, holding{}, classify(err)
		}
	}
}
