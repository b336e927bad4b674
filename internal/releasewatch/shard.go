package releasewatch

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/redisconn"
)

const (
	// sendTimeout bounds one network call of an owner: a SUBSCRIBE or UNSUBSCRIBE, with the
	// dial and handshake of the connection when it has none.
	sendTimeout = 5 * time.Second
	// ackTimeout is how long a subscription sent may go unacknowledged before its owner sends
	// it again on a new connection. A server that refuses it says so in a reply clients do
	// not pass on (MOVED, after a Cluster slot moved to another node), and a subscription sent
	// as the connection broke is not sent again by the client.
	ackTimeout = 5 * time.Second
	// resend is how long an owner waits to send again a subscription whose send failed.
	resend = 250 * time.Millisecond
)

// A shard is one pub/sub connection and the channels subscribed on it. Its fields are guarded
// by Set.mu; only its owner (run) calls the connection.
type shard struct {
	key      int
	channels map[string]*channel
	// leaving counts, per channel, the UNSUBSCRIBEs sent on the current connection whose
	// acknowledgement has not come: the acknowledgement of any other unsubscription is the
	// server dropping a subscription.
	leaving map[string]int
	ps      redisconn.PubSub // the connection whose acknowledgements count; nil between two
	stale   bool             // the server dropped a subscription: the owner reconnects
	retryAt time.Time        // when a subscription whose send failed may be sent again

	ctx    context.Context // the owner's network calls; cancelled by stop
	cancel context.CancelFunc
	poked  chan struct{} // holds one poke: the owner has something to look at
	quit   chan struct{} // closed by stop
}

type channel struct {
	waiters   map[*Waiter]struct{}
	ready     chan struct{} // closed on the first acknowledgement
	acked     bool          // ready is closed
	sent      bool          // its subscription was sent, or is on its way, on the current connection
	sentAt    time.Time     // when that send returned; zero while it is on its way
	live      bool          // acknowledged on the current connection
	idleSince time.Time     // when its last waiter left
}

// add registers w; the caller holds Set.mu.
func (ch *channel) add(w *Waiter) {
	ch.waiters[w] = struct{}{}
	ch.idleSince = time.Time{}
}

// wake wakes every waiter of ch; the caller holds Set.mu.
func (ch *channel) wake() {
	for w := range ch.waiters {
		w.signal()
	}
}

// start makes the shard for key and starts its owner; the caller holds Set.mu and has
// checked that the Set is open.
func (s *Set) start(key int) *shard {
	if s.shards == nil {
		s.shards = make(map[int]*shard)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sh := &shard{
		key:      key,
		channels: make(map[string]*channel),
		leaving:  make(map[string]int),
		ctx:      ctx,
		cancel:   cancel,
		poked:    make(chan struct{}, 1),
		quit:     make(chan struct{}),
	}
	s.shards[key] = sh
	s.owners.Add(1)
	go s.run(sh)
	return sh
}

// poke tells the owner to look at the shard again.
func (sh *shard) poke() {
	select {
	case sh.poked <- struct{}{}:
	default:
	}
}

// stop tells the owner to close the connection and return, and cancels its network call.
func (sh *shard) stop() {
	close(sh.quit)
	sh.cancel()
}

// step is what an owner does next. It reconnects first, then sends, then waits.
type step struct {
	done        bool // the shard has no channel left, or the Set is closed
	reconnect   bool
	subscribe   []string
	unsubscribe []string
	wait        time.Duration // before looking again when there is nothing to send; <0: no end
}

// conn is an owner's connection and its dispatch goroutine.
type conn struct {
	ps         redisconn.PubSub
	reroute    bool          // the next connection follows a lost subscription
	dispatched chan struct{} // closed when the dispatch goroutine of ps returns
}

// run is a shard's owner. It makes the shard's network calls one at a time, in the order it
// decides them, so that the server's subscriptions end up as the shard records them, until
// the shard has no channel left or the Set is closed; then it closes the connection.
func (s *Set) run(sh *shard) {
	defer s.owners.Done()
	defer sh.cancel()
	var cn conn
	defer s.disconnect(sh, &cn)
	timer := time.NewTimer(time.Hour)
	timer.Stop() // armed only when there is something to wait for
	for {
		st := s.plan(sh, time.Now())
		if st.done {
			return
		}
		if st.reconnect {
			s.disconnect(sh, &cn)
			cn.reroute = true
		}
		if len(st.subscribe) > 0 {
			s.sent(sh, st.subscribe, s.subscribe(sh, &cn, st.subscribe))
		}
		if len(st.unsubscribe) > 0 {
			s.left(sh, st.unsubscribe, s.unsubscribe(sh, cn.ps, st.unsubscribe))
		}
		if st.reconnect || len(st.subscribe) > 0 || len(st.unsubscribe) > 0 {
			continue
		}
		if st.wait >= 0 {
			timer.Reset(st.wait)
		}
		select {
		case <-sh.poked:
		case <-timer.C:
		case <-sh.quit:
			return
		}
		timer.Stop()
	}
}

// plan decides the owner's next step and records it in the shard: the channels to subscribe
// are marked sent, the ones to unsubscribe are gone from it.
func (s *Set) plan(sh *shard, now time.Time) step {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st step
	select {
	case <-sh.quit:
		st.done = true
		return st
	default:
	}
	if sh.stale || sh.overdue(now) {
		// The connection lost a subscription the server will not give back by itself: a new
		// connection, made for the first channel's slot as the cluster client sees it now,
		// subscribes them all again.
		st.reconnect = true
		sh.stale = false
		clear(sh.leaving)
		for _, ch := range sh.channels {
			ch.sent, ch.sentAt, ch.live = false, time.Time{}, false
		}
	}
	var next time.Time
	soon := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for name, ch := range sh.channels {
		idle := len(ch.waiters) == 0
		switch {
		case idle && ch.live && !now.Before(ch.idleSince.Add(linger)):
			// Only an acknowledged subscription is given up: an acknowledgement still on its
			// way would otherwise confirm the channel's next subscription before the server
			// took it.
			delete(sh.channels, name)
			sh.leaving[name]++
			st.unsubscribe = append(st.unsubscribe, name)
		case idle && ch.live:
			soon(ch.idleSince.Add(linger))
		case !ch.sent && now.Before(sh.retryAt):
			soon(sh.retryAt)
		case !ch.sent:
			ch.sent = true
			st.subscribe = append(st.subscribe, name)
		case !ch.live && !ch.sentAt.IsZero():
			soon(ch.sentAt.Add(ackTimeout))
		}
	}
	if len(sh.channels) == 0 {
		// Closing the connection unsubscribes its last channels.
		if s.shards[sh.key] == sh {
			delete(s.shards, sh.key)
		}
		st.done = true
		return st
	}
	st.wait = -1
	if !next.IsZero() {
		st.wait = next.Sub(now)
	}
	return st
}

// overdue says whether a subscription sent on the current connection went unacknowledged
// for ackTimeout; the caller holds Set.mu.
func (sh *shard) overdue(now time.Time) bool {
	for _, ch := range sh.channels {
		if ch.sent && !ch.live && !ch.sentAt.IsZero() && !now.Before(ch.sentAt.Add(ackTimeout)) {
			return true
		}
	}
	return false
}

// subscribe sends the subscription of names, on a new connection if the shard has none.
func (s *Set) subscribe(sh *shard, cn *conn, names []string) error {
	ctx, cancel := context.WithTimeout(sh.ctx, sendTimeout)
	defer cancel()
	if cn.ps != nil {
		return cn.ps.Subscribe(ctx, names...)
	}
	// A PubSub connects on its first subscription, to the node of its first channel's slot;
	// the dispatch goroutine starts after it, since one that connected first would connect
	// without a channel, to any node.
	cn.ps = s.c.PubSub(ctx, s.sharded, cn.reroute)
	cn.reroute = false
	err := cn.ps.Subscribe(ctx, names...)
	s.mu.Lock()
	sh.ps = cn.ps
	s.mu.Unlock()
	cn.dispatched = make(chan struct{})
	go s.dispatch(sh, cn.ps, cn.dispatched)
	return err
}

// unsubscribe sends the unsubscription of names on ps.
func (s *Set) unsubscribe(sh *shard, ps redisconn.PubSub, names []string) error {
	if ps == nil {
		return nil // never subscribed
	}
	ctx, cancel := context.WithTimeout(sh.ctx, sendTimeout)
	defer cancel()
	return ps.Unsubscribe(ctx, names...)
}

// sent records the outcome of sending the subscription of names. One that failed is sent
// again after resend: the client (go-redis) does not send it on the connection it makes in place of the
// one that failed.
func (s *Set) sent(sh *shard, names []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if err != nil {
		sh.retryAt = now.Add(resend)
	}
	for _, name := range names {
		ch := sh.channels[name]
		switch {
		case ch == nil || ch.live:
		case err != nil:
			ch.sent = false
		default:
			ch.sentAt = now
		}
	}
}

// left records the outcome of sending the unsubscription of names: after a failure no
// acknowledgement comes, and the client (go-redis) does not subscribe them on its next connection.
func (s *Set) left(sh *shard, names []string, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range names {
		if sh.leaving[name]--; sh.leaving[name] <= 0 {
			delete(sh.leaving, name)
		}
	}
}

// disconnect closes the owner's connection, if any, and waits for its dispatch goroutine.
func (s *Set) disconnect(sh *shard, cn *conn) {
	if cn.ps == nil {
		return
	}
	s.mu.Lock()
	sh.ps = nil // its acknowledgements no longer count
	s.mu.Unlock()
	_ = cn.ps.Close()
	<-cn.dispatched
	*cn = conn{reroute: cn.reroute}
}
