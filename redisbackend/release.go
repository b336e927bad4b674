package redisbackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// Release implements fencelock.Backend.
func (b *Backend) Release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	return b.release(ctx, lease, hold)
}

// release is Release for a usable name, also while the Backend closes.
func (b *Backend) release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	if lease.Limit > 0 {
		return b.releasePermit(ctx, lease, hold)
	}
	n, err := redisconn.Int64(b.pipe.run(ctx, releaseScript, b.queueKeys(lease.Name), lease.Owner, hold, b.announce.Publish, b.retentionArg, b.announce.Count, lease.Token))
	switch {
	case err != nil:
		return 0, redislayer.Classify(err)
	case n < 0:
		return 0, fmt.Errorf("%w: %q is not held by this owner in Redis", fencelock.ErrNotHeld, lease.Name)
	}
	return int(n), nil
}
