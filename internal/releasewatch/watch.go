// Package releasewatch shares one Redis pub/sub connection among the waiters of a client, so
// that they wake when a lock is released. The Redis and Redlock backends both use it: Redis
// once per client, Redlock once per node.
//
// Locking: Set.mu guards the Set's shards and everything in them, and nobody holds it across a
// network call. Each shard has one goroutine, its owner (shard.go), that alone sends the
// shard's SUBSCRIBE and UNSUBSCRIBE commands and opens, replaces and closes its connection, in
// the order it decides them; Add, Join and Remove only record what they want and poke it. The
// dispatch goroutine (dispatch.go), which takes mu for every message, therefore never waits
// behind a subscription for the server to answer, and neither does a caller.
package releasewatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// Subscriber is the part of a redisconn.Conn that pub/sub needs.
type Subscriber interface {
	PubSub(ctx context.Context, sharded, reroute bool) redisconn.PubSub
}

var _ Subscriber = redisconn.Conn(nil)

// AckTimeout bounds a waiter's wait for the server (for Redlock, the nodes) to acknowledge its
// subscription. A waiter that gets no acknowledgement sleeps until the holder's TTL runs out
// instead.
const AckTimeout = 2 * time.Second

// ErrClosed is Add's error after Close. It matches driver.ErrClosed.
var ErrClosed = fmt.Errorf("%w: the release watch was closed", driver.ErrClosed)

// Set is the release channels one client watches, and their waiters. Without sharded pub/sub
// it has one connection; with it, one per Cluster slot that has waiters, because a shard channel
// can only be subscribed on the node that owns its slot, and a client resubscribes all of a
// connection's shard channels in one command after a reconnect. It is safe for concurrent use.
type Set struct {
	c       Subscriber
	sharded bool

	mu     sync.Mutex // guards closed, shards and everything in them
	closed bool
	shards map[int]*shard

	owners sync.WaitGroup // the shards' owners; each waits for its dispatch goroutine
}

// New returns a Set over c; sharded chooses SSUBSCRIBE over SUBSCRIBE.
func New(c Subscriber, sharded bool) *Set { return &Set{c: c, sharded: sharded} }

// A Waiter is woken, through Wake, each time a channel it watches may have seen a release. One
// Waiter may watch the same channel on several Sets (Redlock's nodes); any of them wakes it.
type Waiter struct {
	Wake chan struct{}
	// Message, when set, sees each message's payload first and says whether it wakes the
	// Waiter. It runs on the dispatch goroutine with the Set locked: it must not block, nor
	// call the Set. A subscription acknowledged again after a reconnect always wakes.
	Message func(payload string) (wake bool)
}

// NewWaiter returns a Waiter whose Wake holds one pending wake-up.
func NewWaiter() *Waiter { return &Waiter{Wake: make(chan struct{}, 1)} }

// signal leaves a wake-up for w, unless one is pending already.
func (w *Waiter) signal() {
	select {
	case w.Wake <- struct{}{}:
	default:
	}
}

// linger is how long a channel stays subscribed after its last waiter left. A client that
// waits for the same lock again and again (a worker loop under contention) then keeps its
// subscription and connection instead of making them anew for every wait.
const linger = 250 * time.Millisecond

// Add registers w for name and returns a channel closed once the server acknowledged the
// subscription: a release published after that reaches w, or, if the connection is lost,
// w is woken once the subscription is acknowledged again. Add sends nothing and never waits
// for the server: the shard's owner sends the subscription. The error is ctx's when ctx has
// ended and ErrClosed after Close; w is then not registered.
func (s *Set) Add(ctx context.Context, name string, w *Waiter) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := s.key(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	sh := s.shards[key]
	if sh == nil {
		sh = s.start(key)
	}
	ch := sh.channels[name]
	if ch == nil {
		ch = &channel{waiters: make(map[*Waiter]struct{}), ready: make(chan struct{})}
		sh.channels[name] = ch
		sh.poke()
	}
	ch.add(w)
	return ch.ready, nil
}

// Join registers w for name only if name is subscribed already and the server acknowledged it,
// and says whether it did. A waiter that joins before it acts (queues for a lock) cannot miss a
// message its action causes, and sends no subscription when there is none to share. After
// Close it joins nothing.
func (s *Set) Join(name string, w *Waiter) bool {
	key := s.key(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[key]
	if sh == nil {
		return false
	}
	ch := sh.channels[name]
	if ch == nil || !ch.acked {
		return false
	}
	ch.add(w)
	return true
}

// Remove ends w's watch of name: once it returns, w hears nothing more from name on this Set.
// A channel left without waiters stays subscribed for a short while (linger) in case it is
// wanted again; then its owner unsubscribes it, and closes the connection with its last
// channel.
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
	if len(ch.waiters) == 0 {
		ch.idleSince = time.Now()
		sh.poke()
	}
}

// Close ends every subscription and returns once the Set's goroutines are gone; afterwards Add
// fails with ErrClosed and Join joins nothing. An owner in the middle of a network call
// finishes it first: Close cancels its context, which ends a dial at once and a handshake with
// a server that does not answer at the call's deadline, sendTimeout (at the client's read
// timeout if the client ignores context deadlines). Close is idempotent and safe to call
// concurrently.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	shards := s.shards
	s.shards = nil
	s.mu.Unlock()
	for _, sh := range shards {
		sh.stop()
	}
	s.owners.Wait()
}

func (s *Set) key(name string) int {
	if s.sharded {
		return Slot(name)
	}
	return 0
}
