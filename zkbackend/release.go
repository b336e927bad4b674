package zkbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// Release implements driver.Backend. It acts only on the first node in line, and only when
// that node names lease.Owner (for a permit, only on a node of lease.Owner that holds its
// permits); the last hold deletes the node, and the directory with it when no one else is in
// line.
//
// A release that cannot be confirmed — the connection is down, or ctx ends first — returns an
// error matching driver.ErrUnavailable or ctx's error, and is owed: the Backend makes it
// once the session is back, since the node would otherwise hold the lock for no one as long as
// the session lasts. Close waits for it.
func (b *Backend) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if err := b.usable(ctx, lease.Name); err != nil {
		return 0, err
	}
	k := keyOf(lease.Name, lease.Owner, lease.Limit)
	o := owed{holder: k, hold: hold}
	h, cached := b.holding(k)
	if cached && b.lost(h) {
		// Its node ended with the session: nothing is left to release, or owed.
		b.forget(k, h.path)
		return 0, fmt.Errorf("%w: the ZooKeeper session that owned the lock node of %q ended: it expired, or its connection was closed", driver.ErrNotHeld, lease.Name)
	}
	if cached {
		o.guid, o.session = h.guid(), h.session
	}
	if s := b.conn.State(); s != zk.StateHasSession {
		b.owed.Owe(o, nil)
		return 0, fmt.Errorf("%w: no ZooKeeper session (connection %v): the release of %q is owed, to be made once the session is back", driver.ErrUnavailable, s, lease.Name)
	}
	n, err := b.release(ctx, k, hold, lease.Token, h, cached, &o)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) && !errors.Is(err, driver.ErrInvalid) {
		b.owed.Owe(o, inFlight(err))
	}
	return n, err
}

// release is Release once the connection is up. o names the node it acts on as soon as it
// knows it. token is the czxid of the node the hold was granted in, or 0 when the caller does
// not know it: the owner's node of another czxid is a later lock of the owner (its earlier
// one was lost), which does not have the hold.
func (b *Backend) release(ctx context.Context, k holder, hold string, token int64, h holding, cached bool, o *owed) (int, error) {
	if cached && token != 0 && h.token != token {
		return 0, laterNode(k)
	}
	if cached {
		if n, err := b.releaseNode(ctx, k, h.path, hold, h.data, h.version, false); err != errVanished {
			return n, err
		}
	}
	dir := b.Path(k.name)
	for range lookTries {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if k.permit {
			h, err := b.permitOf(ctx, k, hold)
			if errors.Is(err, driver.ErrNotHeld) {
				// Released already, maybe: the owner's node says how many holds are left.
				h, err = b.permitOf(ctx, k, "")
			}
			if err != nil {
				return 0, err
			}
			if token != 0 && h.token != token {
				return 0, laterNode(k)
			}
			o.guid, o.session = h.guid(), h.session
			n, err := b.releaseNode(ctx, k, h.path, hold, h.data, h.version, true)
			if err == errVanished {
				continue
			}
			return n, err
		}
		q, err := b.queue(ctx, dir)
		if err != nil {
			return 0, err
		}
		if len(q) == 0 {
			return 0, fmt.Errorf("%w: %q is not held", driver.ErrNotHeld, k.name)
		}
		path := dir + "/" + q[0].name
		data, stat, err := b.read(ctx, path)
		if err == errVanished {
			continue
		}
		if err != nil {
			return 0, err
		}
		if data.owner != k.owner {
			return 0, fmt.Errorf("%w: %q is held by another owner", driver.ErrNotHeld, k.name)
		}
		if token != 0 && stat.Czxid != token {
			return 0, laterNode(k)
		}
		o.guid, o.session = q[0].guid, stat.EphemeralOwner
		n, err := b.releaseNode(ctx, k, path, hold, data, stat.Version, true)
		if err == errVanished {
			continue
		}
		return n, err
	}
	return 0, fmt.Errorf("%w: %q changed hands %d times while being released", driver.ErrUnavailable, k.name, lookTries)
}

// laterNode is the error of a release whose hold was of an earlier node of its owner.
func laterNode(k holder) error {
	return fmt.Errorf("%w: the owner's lock node of %q is a later one: the node of this hold is gone", driver.ErrNotHeld, k.name)
}

// releaseNode takes hold out of the lock node at path, whose data and version the caller last
// saw (fresh: just now), and returns the hold count left. A hold that is not there was
// released already: the count stays. It returns errVanished when the node is gone.
func (b *Backend) releaseNode(ctx context.Context, k holder, path, hold string, data lockData, version int32, fresh bool) (int, error) {
	for {
		var err error
		switch left := data.without(hold); {
		case !data.has(hold) && fresh:
			return data.count(), nil
		case !data.has(hold):
			err = zk.ErrBadVersion // a stale copy: read before concluding
		case left.count() == 0:
			if err = b.remove(ctx, path, version, b.crowdedAt(k, path)); err == nil {
				b.forget(k, path)
				return 0, nil
			}
		default:
			var stat *zk.Stat
			if stat, err = b.set(ctx, path, left.encode(), version); err == nil {
				b.update(k, path, left, stat.Version)
				return left.count(), nil
			}
		}
		switch err {
		case zk.ErrBadVersion:
			d, stat, rerr := b.read(ctx, path)
			if rerr != nil {
				if rerr == errVanished {
					b.forget(k, path)
				}
				return 0, rerr
			}
			data, version, fresh = d, stat.Version, true
		case zk.ErrNoNode:
			b.forget(k, path)
			return 0, errVanished
		default:
			return 0, classify(err)
		}
	}
}

// remove deletes a lock node at version, and its directory when that is left empty, so that
// a name leaves nothing behind once no one holds or wants it. crowded says others were in line
// behind the node when it was granted: they keep the directory, and the last of them removes
// it, so the node goes alone, in one write, not a failed one first. (Should all of them leave
// before this release, the empty directory stays until the name is next used.)
func (b *Backend) remove(ctx context.Context, path string, version int32, crowded bool) error {
	dir := parent(path)
	if crowded {
		err := b.delete(ctx, path, version)
		if err == nil {
			b.busy(dir, true)
		}
		return err
	}
	_, err := b.multi(ctx,
		&zk.DeleteRequest{Path: path, Version: version},
		&zk.DeleteRequest{Path: dir, Version: -1},
	)
	switch err {
	case nil:
		b.busy(dir, false)
	case zk.ErrNotEmpty:
		// Others are in line (the node itself, ephemeral, has no children): they keep the
		// directory, and the last of them removes it.
		if err = b.delete(ctx, path, version); err == nil {
			b.busy(dir, true)
		}
	}
	return err
}

var _ driver.Publisher = (*Backend)(nil)

// Publish implements driver.Publisher: the metadata in the owner's lock node, first in line
// and made at lease.Token, is replaced by a write of the version read, which fires the watches
// of WatchHolder. A write that met another (a renewal, a re-entry) reads the node again.
func (b *Backend) Publish(ctx context.Context, lease driver.Lease, meta string) error {
	if err := b.usable(ctx, lease.Name); err != nil {
		return err
	}
	k := keyOf(lease.Name, lease.Owner, 0)
	for range lookTries {
		h, err := b.headOf(ctx, k)
		if err != nil {
			return err
		}
		if h.token != lease.Token {
			return laterNode(k)
		}
		data := h.data
		data.meta = meta
		stat, err := b.set(ctx, h.path, data.encode(), h.version)
		switch {
		case err == zk.ErrBadVersion:
			continue // written meanwhile: read it again
		case err == zk.ErrNoNode:
			return fmt.Errorf("%w: %q is no longer held by this owner in ZooKeeper", driver.ErrNotHeld, lease.Name)
		case err != nil:
			return classify(err)
		}
		b.update(k, h.path, data, stat.Version)
		return nil
	}
	return fmt.Errorf("%w: %q was written %d times while its metadata was being replaced", driver.ErrUnavailable, lease.Name, lookTries)
}
