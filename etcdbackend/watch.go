package etcdbackend

import (
	"context"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

var _ driver.HolderWatcher = (*Backend)(nil)

// WatchHolder implements driver.HolderWatcher with two etcd watches: on the lock's queue
// (an acquisition, a release, a hand-over to the next in line, a lease's expiry) and on its
// holders' metadata (Publish). A watch that breaks (compaction, a lost leader) is made again,
// and the channel then receives a value: a change may have passed unseen. The watches end
// with stop, ctx or the Backend's Close; stop waits for them.
func (b *Backend) WatchHolder(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.usable(name); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stopBackend := context.AfterFunc(b.ctx, cancel)
	changed := make(chan struct{}, 1)
	wake := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	ready := make(chan struct{}, 2)
	for _, pfx := range []string{b.queuePrefix(name), b.prefix + "!meta/" + url.PathEscape(name) + "/"} {
		wg.Go(func() { b.watchPrefix(wctx, pfx, ready, wake) })
	}
	stop := sync.OnceFunc(func() {
		cancel()
		stopBackend()
		wg.Wait()
	})
	for range 2 {
		select {
		case <-ready:
		case <-wctx.Done():
			stop()
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			return nil, nil, b.open()
		}
	}
	return changed, stop, nil
}

// watchPrefix calls wake for each change under pfx until ctx ends, and once after each watch it
// had to make again; it tells ready once, when its first watch is in place.
func (b *Backend) watchPrefix(ctx context.Context, pfx string, ready chan<- struct{}, wake func()) {
	told := false
	for again := 0; ctx.Err() == nil; again++ {
		if again > 0 && !pause.For(ctx, rewatchBackoff(again)) {
			return
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range b.c.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil {
				break
			}
			if wr.Created {
				if !told {
					told = true
					ready <- struct{}{}
				} else {
					wake() // a watch made again: a change may have passed unseen
				}
			}
			if len(wr.Events) > 0 {
				wake()
			}
		}
		cancel()
	}
}

// rewatchBackoff spaces the watches made again after they broke, so that a cluster without a
// leader is not asked in a loop: 50ms doubling to 2s.
func rewatchBackoff(again int) time.Duration {
	return min(50*time.Millisecond<<min(again-1, 6), 2*time.Second)
}

// PushesAcquisitions implements driver.HolderWatcher: etcd's watch sees every change of the
// lock's keys, the expiry of a holder's lease among them.
func (b *Backend) PushesAcquisitions() bool { return true }
