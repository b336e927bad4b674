package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
)

// subscribeTimeout bounds the wait for the nodes to acknowledge a subscription. A waiter whose
// subscription no node acknowledged sleeps until the holder's TTL runs out instead.
const subscribeTimeout = 2 * time.Second

// WatchRelease implements fencelock.ReleaseWatcher. It subscribes to the lock's release channel
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
	if err := b.enter(len(b.nodes)); err != nil {
		return nil, nil, err
	}
	channel := b.channelKey(name)
	wt := &waiter{wake: make(chan struct{}, 1)}
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	acks := make(chan bool, len(b.nodes))
	var wg sync.WaitGroup
	for _, nd := range b.nodes {
		wg.Add(1)
		go func() {
			defer b.calls.Done()
			defer wg.Done()
			ready := nd.watch.add(sctx, channel, wt)
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
			nd.watch.remove(channel, wt)
		}
	})
	switch {
	case ctx.Err() != nil:
		stop()
		return nil, nil, ctxErr("watch", name, ctx.Err())
	case acked == 0:
		stop()
		return nil, nil, fmt.Errorf("%w: redlock: no node acknowledged the subscription to %s within %v", fencelock.ErrUnavailable, channel, subscribeTimeout)
	}
	return wt.wake, stop, nil
}

// nodeWatch is one node's side of the release notifications.
type nodeWatch struct {
	n       *node
	sharded bool
	mu      sync.Mutex // guards shards and everything in them
	shards  map[int]*shard
}

// A shard is one pub/sub connection and the channels it serves. Without sharded pub/sub a node
// has one; with it, one per Cluster slot that has waiters, because a shard channel can only be
// subscribed on the node that owns its slot.
type shard struct {
	ps       *redis.PubSub
	channels map[string]*channel
	exited   chan struct{} // closed when the dispatch goroutine returns
}

// A channel is one lock's release channel on one node and the waiters on it.
type channel struct {
	waiters   map[*waiter]struct{}
	confirmed bool          // the node acknowledged the subscription
	ready     chan struct{} // closed on the first acknowledgement
}

// A waiter is one WatchRelease call. It is registered with every node, and any of them wakes it.
type waiter struct{ wake chan struct{} }

// add registers wt for name and returns a channel closed once the node acknowledged the
// subscription. A subscription the node did not take now (the node is down) stays recorded
// in go-redis, which sends it again when it reconnects.
func (w *nodeWatch) add(ctx context.Context, name string, wt *waiter) <-chan struct{} {
	key := 0
	if w.sharded {
		key = slot(name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shards == nil {
		w.shards = make(map[int]*shard)
	}
	sh := w.shards[key]
	ch := (*channel)(nil)
	if sh == nil {
		// Subscribe as the connection is made: a PubSub that connects without a channel goes
		// to a random Cluster node, where a shard channel cannot be subscribed.
		sh = &shard{channels: make(map[string]*channel), exited: make(chan struct{})}
		ch = &channel{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		if w.sharded {
			sh.ps = w.n.c.SSubscribe(ctx, name)
		} else {
			sh.ps = w.n.c.Subscribe(ctx, name)
		}
		w.shards[key] = sh
		go w.dispatch(sh)
	} else if ch = sh.channels[name]; ch == nil {
		ch = &channel{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		if w.sharded {
			_ = sh.ps.SSubscribe(ctx, name)
		} else {
			_ = sh.ps.Subscribe(ctx, name)
		}
	}
	ch.waiters[wt] = struct{}{}
	return ch.ready
}

// remove ends wt's watch of name on this node.
func (w *nodeWatch) remove(name string, wt *waiter) {
	key := 0
	if w.sharded {
		key = slot(name)
	}
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
	delete(ch.waiters, wt)
	if len(ch.waiters) > 0 {
		w.mu.Unlock()
		return
	}
	delete(sh.channels, name)
	if len(sh.channels) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if w.sharded {
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

func (w *nodeWatch) closeAll() {
	w.mu.Lock()
	shards := w.shards
	w.shards = nil
	w.mu.Unlock()
	for _, sh := range shards {
		_ = sh.ps.Close()
		<-sh.exited
	}
}

// dispatch wakes the waiters of a channel on each release message. A subscription
// acknowledged again after a reconnect wakes them too: a release may have passed unseen while
// the connection was down.
func (w *nodeWatch) dispatch(sh *shard) {
	defer close(sh.exited)
	for msg := range sh.ps.ChannelWithSubscriptions(redis.WithChannelSize(64)) {
		var name string
		var ack bool
		switch m := msg.(type) {
		case *redis.Message:
			name = m.Channel
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			name, ack = m.Channel, true
		default:
			continue
		}
		w.mu.Lock()
		if ch := sh.channels[name]; ch != nil {
			if ack && !ch.confirmed {
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

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag, mod 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
