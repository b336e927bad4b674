package redisbackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// Release implements driver.Backend.
func (b *Backend) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	return b.release(ctx, lease, hold)
}

// release is Release for a usable name, also while the Backend closes.
func (b *Backend) release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if lease.Limit > 0 {
		return b.releasePermit(ctx, lease, hold)
	}
	n, err := redisconn.Int64(b.pipe.run(ctx, releaseScript, b.queueKeys(lease.Name), lease.Owner, hold, b.announce.Publish, b.retentionArg, b.announce.Count, lease.Token, b.form))
	switch {
	case err != nil:
		return 0, redislayer.Classify(err)
	case n < 0:
		return 0, fmt.Errorf("%w: %q is not held by this owner in Redis", driver.ErrNotHeld, lease.Name)
	}
	return int(n), nil
}

var _ driver.Publisher = (*Backend)(nil)

// Publish implements driver.Publisher: one script replaces the lock's metadata, when the
// owner holds it under the lease's token, and announces the change on the lock's release
// channel (see WatchHolder).
func (b *Backend) Publish(ctx context.Context, lease driver.Lease, meta string) error {
	if err := b.usable(lease.Name); err != nil {
		return err
	}
	n, err := redisconn.Int64(b.pipe.run(ctx, publishScript, []string{b.Key(lease.Name)}, lease.Owner, lease.Token, meta, b.announce.Publish, b.announce.Count))
	switch {
	case err != nil:
		return redislayer.Classify(err)
	case n < 0:
		return fmt.Errorf("%w: %q is not held by this owner under token %d in Redis", driver.ErrNotHeld, lease.Name, lease.Token)
	}
	return nil
}
