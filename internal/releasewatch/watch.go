// Package releasewatch shares one Redis pub/sub connection among the waiters of a client, so
// that they wake when a lock is released. The Redis and Redlock backends both use it: Redis
// once per client, Redlock once per node.
package releasewatch

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Subscriber is the part of a go-redis client that pub/sub needs.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Set is the release channels one client watches, and their waiters. Without sharded pub/sub
// it has one connection; with it, one per Cluster slot that has waiters, because a shard channel
// can only be subscribed on the node that owns its slot, and go-redis resubscribes all of a
// connection's shard channels in one command after a reconnect. It is safe for concurrent use.
type Set struct {
	c       Subscriber
	sharded bool
	mu      sync.Mutex // guards shards and everything in them
	shards  map[int]*shard
}

// New returns a Set over c; sharded chooses SSUBSCRIBE over SUBSCRIBE.
func New(c Subscriber, sharded bool) *Set { return &Set{c: c, sharded: sharded} }

// A Waiter is woken, through Wake, each time a channel it watches may have seen a release. One
// Waiter may watch the same channel on several Sets (Redlock's nodes); any of them wakes it.
type Waiter struct {
	Wake chan struct{}
	// Message, when set, sees each message's payload first and says whether it wakes the
	// Waiter. It runs on the dispatch goroutine with the Set locked: it must not block.
	// A subscription acknowledged again after a reconnect always wakes.
	Message func(payload string) (wake bool)
}

// NewWaiter returns a Waiter whose Wake holds one pending wake-up.
func NewWaiter() *Waiter { return &Waiter{Wake: make(chan struct{}, 1)} }

type shard struct {
	ps       *redis.PubSub
	channels map[string]*channel
	exited   chan struct{} // closed when the dispatch goroutine returns
}

type channel struct {
	waiters   map[*Waiter]struct{}
	confirmed bool          // the server acknowledged the subscription
	ready     chan struct{} // closed on the first acknowledgement
	idle      *time.Timer   // set while the channel has no waiters: unsubscribes when it fires
}

// linger is how long a channel stays subscribed after its last waiter left. A client that
// waits for the same lock again and again (a worker loop under contention) then keeps its
// subscription and connection instead of making them anew for every wait.
const linger = 250 * time.Millisecond

// Add registers w for name and returns a channel closed once the server acknowledged the
// subscription, and the error of sending the subscription, if any. A subscription not taken
// now stays recorded in go-redis, which sends it again when it reconnects.
func (s *Set) Add(ctx context.Context, name string, w *Waiter) (<-chan struct{}, error) {
	key := s.key(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shards == nil {
		s.shards = make(map[int]*shard)
	}
	sh := s.shards[key]
	ch := (*channel)(nil)
	var err error
	if sh == nil {
		// Subscribe as the connection is made: a PubSub that connects without a channel goes
		// to a random Cluster node, where a shard channel cannot be subscribed.
		sh = &shard{channels: make(map[string]*channel), exited: make(chan struct{})}
		ch = &channel{waiters: make(map[*Waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		if s.sharded {
			sh.ps = s.c.SSubscribe(ctx, name)
		} else {
			sh.ps = s.c.Subscribe(ctx, name)
		}
		s.shards[key] = sh
		go s.dispatch(sh)
	} else if ch = sh.channels[name]; ch != nil {
		ch.keep()
	} else {
		ch = &channel{waiters: make(map[*Waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		if s.sharded {
			err = sh.ps.SSubscribe(ctx, name)
		} else {
			err = sh.ps.Subscribe(ctx, name)
		}
	}
	ch.waiters[w] = struct{}{}
	return ch.ready, err
}

// Join registers w for name only if name is subscribed already and the server acknowledged it,
// and says whether it did. A waiter that joins before it acts (queues for a lock) cannot miss a
// message its action causes, and sends no subscription when there is none to share.
func (s *Set) Join(name string, w *Waiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[s.key(name)]
	if sh == nil {
		return false
	}
	ch := sh.channels[name]
	if ch == nil || !ch.confirmed {
		return false
	}
	ch.keep()
	ch.waiters[w] = struct{}{}
	return true
}

// keep stops the channel's idle timer; the caller adds a waiter with the Set locked.
func (ch *channel) keep() {
	if ch.idle != nil {
		ch.idle.Stop() // if it fired already, expire sees the waiter and keeps the channel
		ch.idle = nil
	}
}

// Remove ends w's watch of name. A channel left without waiters stays subscribed for a short
// while (linger) in case it is wanted again; then it is unsubscribed, and the last channel of a
// connection closes it.
func (s *Set) Remove(name string, w *Waiter) {
	key := s.key(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[key]
	if sh == nil {
		return
	}
	ch := sh.channels[name]
	if ch == nil {
		return
	}
	if _, ok := ch.waiters[w]; !ok {
		return
	}
	delete(ch.waiters, w)
	if len(ch.waiters) == 0 && ch.idle == nil {
		ch.idle = time.AfterFunc(linger, func() { s.expire(key, name, ch) })
	}
}

// expire unsubscribes ch if it is still idle, and closes its connection if it was the last
// channel there, waiting for the connection's goroutine to end.
func (s *Set) expire(key int, name string, ch *channel) {
	s.mu.Lock()
	sh := s.shards[key]
	if sh == nil || sh.channels[name] != ch || len(ch.waiters) > 0 {
		s.mu.Unlock()
		return
	}
	delete(sh.channels, name)
	if len(sh.channels) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if s.sharded {
			_ = sh.ps.SUnsubscribe(ctx, name)
		} else {
			_ = sh.ps.Unsubscribe(ctx, name)
		}
		cancel()
		s.mu.Unlock()
		return
	}
	delete(s.shards, key)
	s.mu.Unlock()
	_ = sh.ps.Close()
	<-sh.exited
}

// Close ends every subscription and waits for their goroutines.
func (s *Set) Close() {
	s.mu.Lock()
	shards := s.shards
	s.shards = nil
	for _, sh := range shards {
		for _, ch := range sh.channels {
			if ch.idle != nil {
				ch.idle.Stop()
			}
		}
	}
	s.mu.Unlock()
	for _, sh := range shards {
		_ = sh.ps.Close()
		<-sh.exited
	}
}

func (s *Set) key(name string) int {
	if s.sharded {
		return Slot(name)
	}
	return 0
}

// dispatch wakes the waiters of a channel on each release message. A subscription
// acknowledged again after a reconnect wakes them too: a release may have passed unseen while
// the connection was down.
func (s *Set) dispatch(sh *shard) {
	defer close(sh.exited)
	for msg := range sh.ps.ChannelWithSubscriptions(redis.WithChannelSize(64)) {
		var name, payload string
		var ack bool
		switch m := msg.(type) {
		case *redis.Message:
			name, payload = m.Channel, m.Payload
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			name, ack = m.Channel, true
		default:
			continue
		}
		s.mu.Lock()
		if ch := sh.channels[name]; ch != nil {
			if ack && !ch.confirmed {
				ch.confirmed = true
				close(ch.ready)
			} else {
				for w := range ch.waiters {
					if !ack && w.Message != nil && !w.Message(payload) {
						continue
					}
					select {
					case w.Wake <- struct{}{}:
					default:
					}
				}
			}
		}
		s.mu.Unlock()
	}
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag, mod 16384.
func Slot(key string) int {
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
