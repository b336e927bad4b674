package releasewatch

import "github.com/fencelock/fencelock/redisconn"

// dispatch hands each message of ps to the waiters of its channel, and records the server's
// acknowledgements, until ps is closed. It holds Set.mu for each message and nothing else: it
// makes no network call and waits for none.
func (s *Set) dispatch(sh *shard, ps redisconn.PubSub, done chan<- struct{}) {
	defer close(done)
	ps.Receive(func(e redisconn.Event) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case e.Kind == redisconn.Message:
			sh.deliver(e.Channel, e.Payload)
		case sh.ps != ps:
			// What a connection being replaced acknowledges no longer holds.
		case e.Kind == redisconn.Subscribed:
			sh.acknowledged(e.Channel)
		case e.Kind == redisconn.Unsubscribed:
			sh.unsubscribed(e.Channel)
		}
	})
}

// deliver wakes the waiters of name that the payload concerns; the caller holds Set.mu.
func (sh *shard) deliver(name, payload string) {
	ch := sh.channels[name]
	if ch == nil {
		return
	}
	for w := range ch.waiters {
		if w.Message == nil || w.Message(payload) {
			w.signal()
		}
	}
}

// acknowledged records that the server subscribed name; the caller holds Set.mu. The first
// acknowledgement makes the channel ready. A later one follows a new connection (the client
// resubscribes after a reconnect, and the owner after a dropped subscription), and wakes
// the waiters: a release may have passed unseen while the subscription was gone.
func (sh *shard) acknowledged(name string) {
	// An UNSUBSCRIBE of name sent before this SUBSCRIBE has been acknowledged by now, unless
	// its connection broke and took the acknowledgement with it.
	delete(sh.leaving, name)
	ch := sh.channels[name]
	if ch == nil {
		return
	}
	ch.sent, ch.live = true, true
	if !ch.acked {
		ch.acked = true
		close(ch.ready)
		return
	}
	ch.wake()
}

// unsubscribed records that the server unsubscribed name; the caller holds Set.mu. Unless the
// owner asked for it, the server dropped the subscription and keeps the connection: a Redis
// Cluster node does so for the shard channels of a slot it no longer serves (after a failover
// or a slot migration). The owner then subscribes the shard's channels on a new connection.
func (sh *shard) unsubscribed(name string) {
	if n := sh.leaving[name]; n > 0 {
		if n == 1 {
			delete(sh.leaving, name)
		} else {
			sh.leaving[name] = n - 1
		}
		return
	}
	ch := sh.channels[name]
	if ch == nil {
		return
	}
	ch.live = false
	sh.stale = true
	sh.poke()
}
