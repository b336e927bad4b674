package redlock

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/releasewatch"
)

// WatchRelease implements driver.ReleaseWatcher. It subscribes to the lock's release channel
// on every node and returns once a majority of them acknowledged (or, after a bounded wait,
// at least one): a release deletes the lock on the majority that held it, which shares a node
// with any majority, so a release after WatchRelease returns reaches the waiter. The channel
// receives a value when any node announces a release; the waiter then tries again.
//
// Each node has one pub/sub connection (one per Cluster slot with sharded pub/sub), shared by
// all the Backend's waiters; the last waiter of a channel unsubscribes, and the last channel of
// a connection closes it.
func (b *Backend) WatchRelease(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.usable(name); err != nil {
		return nil, nil, err
	}
	if err := b.begin(); err != nil {
		return nil, nil, err
	}
	defer b.ops.Done()
	b.calls.Add(len(b.nodes))
	channel := b.channelKey(name)
	wt := releasewatch.NewWaiter()
	sctx, cancel := context.WithTimeout(ctx, releasewatch.AckTimeout)
	defer cancel()
	acks := make(chan bool, len(b.nodes))
	var wg sync.WaitGroup
	for _, nd := range b.nodes {
		wg.Add(1)
		go func() {
			defer b.calls.Done()
			defer wg.Done()
			// A subscription the node did not take now (it is down) stays recorded in go-redis,
			// which sends it again on reconnect; only the acknowledgement counts here.
			ready, _ := nd.watch.Add(sctx, channel, wt)
			select {
			case <-ready:
				acks <- true
			case <-sctx.Done():
				acks <- false
			}
		}()
	}
	acked := 0
	for got := 0; got < len(b.nodes) && acked < b.quorum; got++ {
		if <-acks {
			acked++
		}
	}
	cancel() // the nodes still unacknowledged stay subscribed; they wake the waiter when they ack
	wg.Wait()
	stop := sync.OnceFunc(func() {
		for _, nd := range b.nodes {
			nd.watch.Remove(channel, wt)
		}
	})
	switch {
	case ctx.Err() != nil:
		stop()
		return nil, nil, ctxErr("watch", name, ctx.Err())
	case acked == 0:
		stop()
		return nil, nil, fmt.Errorf("%w: redlock: no node acknowledged the subscription to %s within %v", driver.ErrUnavailable, channel, releasewatch.AckTimeout)
	}
	return wt.Wake, stop, nil
}
