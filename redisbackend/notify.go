package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/releasewatch"
)

// WatchRelease implements driver.ReleaseWatcher. All of a Backend's waiters share one
// subscription connection (one per Cluster slot with waiters under sharded pub/sub).
func (b *Backend) WatchRelease(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.usable(name); err != nil {
		return nil, nil, err
	}
	channel := b.channelKey(name)
	w := releasewatch.NewWaiter()
	ready, err := b.watch.Add(ctx, channel, w)
	stop := func() { b.watch.Remove(channel, w) }
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w: subscribe %s: %w", driver.ErrUnavailable, channel, err)
	}
	timer := time.NewTimer(releasewatch.AckTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return w.Wake, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	case <-timer.C:
		stop()
		return nil, nil, fmt.Errorf("%w: no acknowledgement of the subscription to %s", driver.ErrUnavailable, channel)
	}
}

// WatchHolder implements driver.HolderWatcher on the channel of WatchRelease: the scripts
// announce there a release, a hand-over to the next in line, a ForceRelease and a new value
// (Publish). A lock's expiry, the acquisition of a free lock and a key removed other than by
// the scripts (a DEL by hand, an eviction, a failover that lost it) are not announced.
func (b *Backend) WatchHolder(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.WatchRelease(ctx, name)
}

// PushesAcquisitions implements driver.HolderWatcher: Redis does not announce a lock's
// expiry, nor the acquisition of a free lock.
func (b *Backend) PushesAcquisitions() bool { return false }
