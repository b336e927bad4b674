package rueidisconn

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencelock/fencelock/redisconn"
)

// resubscribeEvery is how long a PubSub waits before it tries again to connect and subscribe
// after a lost connection.
const resubscribeEvery = 250 * time.Millisecond

var errNotConnected = errors.New("rueidisconn: the subscription connection is being made again")

// A pubsub is one dedicated rueidis connection with pub/sub hooks. rueidis does not carry the
// subscriptions of a dedicated connection over a lost one, so the pubsub does: its keeper
// goroutine connects again and sends the subscription of every channel it has, which the
// server acknowledges again.
//
// Locking: mu guards dc, release, channels and closed, and nobody holds it across a network
// call but Subscribe and Unsubscribe, which send on dc.
type pubsub struct {
	c       rueidis.Client
	sharded bool

	mu       sync.Mutex
	dc       rueidis.DedicatedClient // nil before the first Subscribe and while reconnecting
	release  func()
	channels map[string]struct{} // what the server should have subscribed
	closed   bool

	events chan redisconn.Event // from the hooks to Receive
	done   chan struct{}        // closed by Close
	ctx    context.Context      // the keeper's calls; cancelled by Close
	cancel context.CancelFunc
	keeper sync.WaitGroup
}

func (c *conn) PubSub(ctx context.Context, sharded, reroute bool) redisconn.PubSub {
	// rueidis follows a moved slot by itself: reroute has nothing to add.
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &pubsub{c: c.c, sharded: sharded, channels: make(map[string]struct{}), events: make(chan redisconn.Event, 64), done: make(chan struct{}), ctx: kctx, cancel: cancel}
}

// connect makes the dedicated connection and its hooks, and starts the keeper that watches
// it; the caller holds mu.
func (p *pubsub) connect() {
	p.dc, p.release = p.c.Dedicate()
	lost := p.dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.emit(redisconn.Event{Kind: redisconn.Message, Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			switch s.Kind {
			case "subscribe", "ssubscribe":
				p.emit(redisconn.Event{Kind: redisconn.Subscribed, Channel: s.Channel})
			case "unsubscribe", "sunsubscribe":
				p.emit(redisconn.Event{Kind: redisconn.Unsubscribed, Channel: s.Channel})
			}
		},
	})
	dc := p.dc
	p.keeper.Go(func() { p.keep(dc, lost) })
}

// emit hands e to Receive, unless the pubsub is closed.
func (p *pubsub) emit(e redisconn.Event) {
	select {
	case p.events <- e:
	case <-p.done:
	}
}

// keep waits for dc's connection to end; unless the pubsub closed meanwhile, it connects
// again and subscribes every channel again, until that succeeds or the pubsub closes.
func (p *pubsub) keep(dc rueidis.DedicatedClient, lost <-chan error) {
	for range lost {
	}
	for {
		p.mu.Lock()
		if p.closed || p.dc != dc {
			p.mu.Unlock()
			return
		}
		p.release()
		p.dc = nil
		p.mu.Unlock()
		select {
		case <-time.After(resubscribeEvery):
		case <-p.done:
			return
		}
		p.mu.Lock()
		if p.closed || p.dc != nil {
			// Closed, or a Subscribe made the connection meanwhile, with its own keeper.
			p.mu.Unlock()
			return
		}
		p.connect()
		dc = p.dc
		names := make([]string, 0, len(p.channels))
		for name := range p.channels {
			names = append(names, name)
		}
		var err error
		if len(names) > 0 {
			ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
			err = p.send(ctx, dc, true, names)
			cancel()
		}
		p.mu.Unlock()
		if err == nil {
			return // the new connection's keeper watches it
		}
	}
}

// send sends the (un)subscription of names on dc.
func (p *pubsub) send(ctx context.Context, dc rueidis.DedicatedClient, subscribe bool, names []string) error {
	b := dc.B()
	var cmd rueidis.Completed
	switch {
	case p.sharded && subscribe:
		cmd = b.Ssubscribe().Channel(names...).Build()
	case subscribe:
		cmd = b.Subscribe().Channel(names...).Build()
	case p.sharded:
		cmd = b.Sunsubscribe().Channel(names...).Build()
	default:
		cmd = b.Unsubscribe().Channel(names...).Build()
	}
	return dc.Do(ctx, cmd).Error()
}

func (p *pubsub) Subscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return rueidis.ErrClosing
	}
	for _, ch := range channels {
		p.channels[ch] = struct{}{}
	}
	if p.dc == nil {
		p.connect()
	}
	return p.send(ctx, p.dc, true, channels)
}

func (p *pubsub) Unsubscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range channels {
		delete(p.channels, ch)
	}
	if p.closed || p.dc == nil {
		// No connection: the next one will not subscribe them, and no acknowledgement comes.
		return errNotConnected
	}
	return p.send(ctx, p.dc, false, channels)
}

func (p *pubsub) Receive(handle func(redisconn.Event)) {
	for {
		select {
		case e := <-p.events:
			handle(e)
		case <-p.done:
			return
		}
	}
}

func (p *pubsub) Close() error {
	p.cancel() // first: the keeper may hold mu in a call
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	if p.dc != nil {
		p.release()
		p.dc = nil
	}
	p.mu.Unlock()
	p.keeper.Wait()
	return nil
}
