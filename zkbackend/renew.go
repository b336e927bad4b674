package zkbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// Renew implements driver.Backend. Nothing needs extending: a lock lives as long as the
// session that owns its node, which go-zookeeper keeps alive with its pings. Renew confirms
// instead, through that session's connection, that the session lives and the node is still
// there (witness), and vouches for the lock for one session timeout from the start of the
// call: the server cannot expire the session sooner after hearing from it. Each connection is
// synced with the leader once per call.
func (b *Backend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	out := make([]driver.Renewal, len(leases))
	synced := make(map[*zk.Conn]time.Time)
	for i, l := range leases {
		out[i].Validity, out[i].Err = b.renew(ctx, l, synced)
	}
	return out
}

func (b *Backend) renew(ctx context.Context, l driver.Lease, synced map[*zk.Conn]time.Time) (time.Duration, error) {
	if err := b.usable(ctx, l.Name); err != nil {
		return 0, err
	}
	k := keyOf(l.Name, l.Owner, l.Limit)
	h, ok := b.holding(k)
	if ok && b.lost(h) {
		b.forget(k, h.path)
		return 0, fmt.Errorf("%w: the ZooKeeper session that owned the lock node of %q ended: it expired, or its connection was closed", driver.ErrNotHeld, l.Name)
	}
	if !ok {
		// Not known here (another Backend made the node for the same owner): look.
		var err error
		if k.permit {
			h, err = b.permitOf(ctx, k, "")
		} else {
			h, err = b.headOf(ctx, k)
		}
		if err != nil {
			return 0, err
		}
	}
	// The node's owner never changes and it was first in line, so existing is holding.
	_, keep, err := b.witness(ctx, h, synced)
	switch {
	case err == errVanished:
		b.forget(k, h.path)
		return 0, fmt.Errorf("%w: %q is no longer held by this owner in ZooKeeper", driver.ErrNotHeld, l.Name)
	case err != nil:
		return 0, err
	}
	if !ok {
		b.remember(k, h)
	}
	return keep, nil
}

// headOf returns the node first in line of k's lock, when it is k's owner's.
func (b *Backend) headOf(ctx context.Context, k holder) (holding, error) {
	dir := b.Path(k.name)
	q, err := b.queue(ctx, dir)
	if err != nil {
		return holding{}, err
	}
	if len(q) > 0 {
		path := dir + "/" + q[0].name
		sent := time.Now()
		data, stat, err := b.read(ctx, path)
		switch {
		case err == errVanished:
		case err != nil:
			return holding{}, err
		case data.owner == k.owner:
			return holdingOf(path, data, stat, sent), nil
		}
	}
	return holding{}, fmt.Errorf("%w: %q is no longer held by this owner in ZooKeeper", driver.ErrNotHeld, k.name)
}
