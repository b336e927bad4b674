package zkbackend

import (
	"context"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// Renew implements fencelock.Backend. Nothing needs extending: a lock lives as long as the
// session, which go-zookeeper keeps alive with its pings. Renew confirms instead that the
// session is connected and the owner's node still holds the lock, and vouches for the lock for
// one session timeout from then: the server cannot expire the session sooner after hearing
// from it.
func (b *Backend) Renew(ctx context.Context, leases []fencelock.Lease) []fencelock.Renewal {
	out := make([]fencelock.Renewal, len(leases))
	for i, l := range leases {
		if err := b.renew(ctx, l); err != nil {
			out[i].Err = err
		} else {
			out[i].Validity = b.validity
		}
	}
	return out
}

func (b *Backend) renew(ctx context.Context, l fencelock.Lease) error {
	if err := b.usable(ctx, l.Name); err != nil {
		return err
	}
	if s := b.conn.State(); s != zk.StateHasSession {
		return fmt.Errorf("%w: no ZooKeeper session (connection %v)", fencelock.ErrUnavailable, s)
	}
	k := holder{l.Name, l.Owner}
	if h, ok := b.holding(k); ok {
		if b.lost(h) {
			b.forget(k, h.path)
			return fmt.Errorf("%w: the ZooKeeper session that owned the lock node of %q expired", fencelock.ErrNotHeld, l.Name)
		}
		// The node's owner never changes and it was first in line, so existing is holding.
		exists, _, err := b.conn.Exists(h.path)
		if err != nil {
			return classify(err)
		}
		if exists {
			return nil
		}
		b.forget(k, h.path)
	}
	// Not known here (another Backend made the node for the same owner), or gone: look.
	dir := b.Path(l.Name)
	q, err := b.queue(dir)
	if err != nil {
		return err
	}
	if len(q) > 0 {
		path := dir + "/" + q[0].name
		data, stat, err := b.read(path)
		switch {
		case err == errVanished:
		case err != nil:
			return err
		case data.owner == l.Owner:
			b.remember(k, b.holdingOf(path, data, stat))
			return nil
		}
	}
	return fmt.Errorf("%w: %q is no longer held by this owner in ZooKeeper", fencelock.ErrNotHeld, l.Name)
}
