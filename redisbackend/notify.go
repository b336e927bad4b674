package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
)

// A shard is one pub/sub connection and the waiters it serves. Without sharded pub/sub there is
// one shard for the whole Backend; with it there is one per Cluster slot that has waiters,
// because a shard channel can only be subscribed on the node that owns its slot, and go-redis
// resubscribes all of a connection's shard channels in one command after a reconnect.
type shard struct {
	ps       *redis.PubSub
	channels map[string]*channel // guarded by watchers.mu
	exited   chan struct{}       // closed when the dispatch goroutine returns
}

// A channel is one lock's release channel and the waiters on it.
type channel struct {
	waiters   map[*waiter]struct{}
	confirmed bool          // the server acknowledged the subscription
	ready     chan struct{} // closed on the first acknowledgement
}

type waiter struct{ wake chan struct{} }

// subscribeTimeout bounds the wait for the server to acknowledge a subscription. A waiter that
// gets no acknowledgement falls back to sleeping until the holder's TTL runs out.
const subscribeTimeout = 2 * time.Second

// WatchRelease implements fencelock.ReleaseWatcher.
func (b *Backend) WatchRelease(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.usable(name); err != nil {
		return nil, nil, err
	}
	return b.watch.add(ctx, b.channelKey(name))
}

func (w *watchers) add(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	wt := &waiter{wake: make(chan struct{}, 1)}
	key := 0
	if w.b.sharded {
		key = slot(name)
	}

	w.mu.Lock()
	if w.shards == nil {
		w.shards = make(map[int]*shard)
	}
	sh := w.shards[key]
	var err error
	ch := (*channel)(nil)
	if sh == nil {
		// Subscribe as the connection is made: a PubSub that connects without a channel goes
		// to a random Cluster node, where a shard channel cannot be subscribed.
		sh = &shard{channels: make(map[string]*channel), exited: make(chan struct{})}
		if w.b.sharded {
			sh.ps = w.b.c.SSubscribe(ctx, name)
		} else {
			sh.ps = w.b.c.Subscribe(ctx, name)
		}
		ch = &channel{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		w.shards[key] = sh
		go w.dispatch(sh)
	} else if ch = sh.channels[name]; ch == nil {
		ch = &channel{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		if w.b.sharded {
			err = sh.ps.SSubscribe(ctx, name)
		} else {
			err = sh.ps.Subscribe(ctx, name)
		}
	}
	ch.waiters[wt] = struct{}{}
	ready := ch.ready
	w.mu.Unlock()

	stop := func() { w.remove(key, name, wt) }
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w: subscribe %s: %w", fencelock.ErrUnavailable, name, err)
	}
	timer := time.NewTimer(subscribeTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return wt.wake, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	case <-timer.C:
		stop()
		return nil, nil, fmt.Errorf("%w: no acknowledgement of the subscription to %s", fencelock.ErrUnavailable, name)
	}
}

// remove ends a waiter's watch; the last waiter of a channel unsubscribes, and the last channel
// of a shard closes its connection.
func (w *watchers) remove(key int, name string, wt *waiter) {
	w.mu.Lock()
	sh := w.shards[key]
	if sh == nil {
		w.mu.Unlock()
		return
	}
	ch := sh.channels[name]
	if ch == nil {
		w.mu.Unlock()
		return
	}
	if _, ok := ch.waiters[wt]; !ok {
		w.mu.Unlock()
		return
	}
	delete(ch.waiters, wt)
	if len(ch.waiters) > 0 {
		w.mu.Unlock()
		return
	}
	delete(sh.channels, name)
	if len(sh.channels) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if w.b.sharded {
			_ = sh.ps.SUnsubscribe(ctx, name)
		} else {
			_ = sh.ps.Unsubscribe(ctx, name)
		}
		cancel()
		w.mu.Unlock()
		return
	}
	delete(w.shards, key)
	w.mu.Unlock()
	_ = sh.ps.Close()
	<-sh.exited
}

func (w *watchers) closeAll() {
	w.mu.Lock()
	shards := w.shards
	w.shards = nil
	w.mu.Unlock()
	for _, sh := range shards {
		_ = sh.ps.Close()
		<-sh.exited
	}
}

// dispatch hands each release message to the waiters of its channel. A subscription
// acknowledged again after a reconnect wakes them too: a release may have passed unseen while
// the connection was down.
func (w *watchers) dispatch(sh *shard) {
	defer close(sh.exited)
	for msg := range sh.ps.ChannelWithSubscriptions(redis.WithChannelSize(64)) {
		var name string
		var again bool
		switch m := msg.(type) {
		case *redis.Message:
			name = m.Channel
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			name = m.Channel
			again = true
		default:
			continue
		}
		w.mu.Lock()
		ch := sh.channels[name]
		if ch != nil {
			if again && !ch.confirmed {
				ch.confirmed = true
				close(ch.ready)
			} else {
				for wt := range ch.waiters {
					select {
					case wt.wake <- struct{}{}:
					default:
					}
				}
			}
		}
		w.mu.Unlock()
	}
}
