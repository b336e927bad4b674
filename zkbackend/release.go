package zkbackend

import (
	"context"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// Release implements fencelock.Backend. It acts only on the first node in line, and only when
// that node names lease.Owner; the last hold deletes the node, and the lock's directory with it
// when no one else is in line.
func (b *Backend) Release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	if err := b.usable(ctx, lease.Name); err != nil {
		return 0, err
	}
	b.sweep()
	k := holder{lease.Name, lease.Owner}
	if h, ok := b.holding(k); ok {
		if b.lost(h) {
			b.forget(k, h.path)
		} else if n, err := b.releaseNode(k, h.path, hold, h.data, h.version, false); err != errVanished {
			return n, err
		}
	}
	dir := b.Path(lease.Name)
	for range lookTries {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		q, err := b.queue(dir)
		if err != nil {
			return 0, err
		}
		if len(q) == 0 {
			return 0, fmt.Errorf("%w: %q is not held", fencelock.ErrNotHeld, lease.Name)
		}
		path := dir + "/" + q[0].name
		data, stat, err := b.read(path)
		if err == errVanished {
			continue
		}
		if err != nil {
			return 0, err
		}
		if data.owner != lease.Owner {
			return 0, fmt.Errorf("%w: %q is held by another owner", fencelock.ErrNotHeld, lease.Name)
		}
		n, err := b.releaseNode(k, path, hold, data, stat.Version, true)
		if err == errVanished {
			continue
		}
		return n, err
	}
	return 0, fmt.Errorf("%w: %q changed hands %d times while being released", fencelock.ErrUnavailable, lease.Name, lookTries)
}

// releaseNode takes hold out of the lock node at path, whose data and version the caller last
// saw (fresh: just now), and returns the hold count left. A hold that is not there was
// released already: the count stays. It returns errVanished when the node is gone.
func (b *Backend) releaseNode(k holder, path, hold string, data lockData, version int32, fresh bool) (int, error) {
	for {
		var err error
		switch left := data.without(hold); {
		case !data.has(hold) && fresh:
			return data.count(), nil
		case !data.has(hold):
			err = zk.ErrBadVersion // a stale copy: read before concluding
		case left.count() == 0:
			if err = b.remove(path, version); err == nil {
				b.forget(k, path)
				return 0, nil
			}
		default:
			var stat *zk.Stat
			if stat, err = b.conn.Set(path, left.encode(), version); err == nil {
				b.update(k, path, left, stat.Version)
				return left.count(), nil
			}
		}
		switch err {
		case zk.ErrBadVersion:
			d, stat, rerr := b.read(path)
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
// a name leaves nothing behind once no one holds or wants it.
func (b *Backend) remove(path string, version int32) error {
	_, err := b.conn.Multi(
		&zk.DeleteRequest{Path: path, Version: version},
		&zk.DeleteRequest{Path: parent(path), Version: -1},
	)
	if err == zk.ErrNotEmpty {
		// Others are in line (the node itself, ephemeral, has no children): they keep the
		// directory, and the last of them removes it.
		err = b.conn.Delete(path, version)
	}
	return err
}
