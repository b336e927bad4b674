package rueidisconn

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencelock/fencelock/redisconn"
)

const (
	// resubscribeEvery is how long a PubSub waits before it tries again to connect and
	// subscribe after a lost connection.
	resubscribeEvery = 250 * time.Millisecond
	// resubscribeTimeout bounds one such try, with its dial.
	resubscribeTimeout = 5 * time.Second
)

var errNotConnected = errors.New("rueidisconn: the subscription connection is being made again")

// A pubsub is one dedicated rueidis connection at a time, with pub/sub hooks. rueidis does not
// carry the subscriptions of a dedicated connection over a lost one, so the pubsub does: each
// connection it makes subscribes every channel recorded, whoever makes it — Subscribe, or the
// keeper goroutine of the connection before, which waits for it to end and connects again.
//
// A connection that ended, or that a send failed on, is closed and never used again, nor handed
// back to rueidis's pool: in RESP2 rueidis keeps a dedicated connection's pub/sub connection
// for the connection's life, dead or not, and on a Cluster a dedicated connection stays on the
// node it first reached, which answers MOVED once the slot moved. The next connection is made
// by the client's current view (rueidis refreshes its slot map after a MOVED reply).
//
// Locking: mu guards link, channels and closed, and nobody holds it across a network call.
// sending, a semaphore that a caller waits for within its context, is held across each send
// and the dial before it, so that the server gets the (un)subscriptions in the order they were
// recorded; Close does not take it.
type pubsub struct {
	c       rueidis.Client
	cluster bool
	sharded bool

	sending chan struct{}

	mu       sync.Mutex
	link     *link               // nil before the first Subscribe, and between two connections
	channels map[string]struct{} // what the server should have subscribed
	closed   bool

	events chan redisconn.Event // from the hooks to Receive
	done   chan struct{}        // closed by Close
	ctx    context.Context      // the keepers' calls; cancelled by Close
	cancel context.CancelFunc
	owned  sync.WaitGroup // the keepers and the dials; started only while open
}

// link is one dedicated connection.
type link struct {
	dc   rueidis.DedicatedClient
	lost <-chan error // closed when the connection ends
	once sync.Once
}

// close ends the connection; rueidis then drops it from its pool.
func (l *link) close() { l.once.Do(l.dc.Close) }

func (c *conn) PubSub(ctx context.Context, sharded, reroute bool) redisconn.PubSub {
	// reroute has nothing to add: each new connection is made by the client's current slot map.
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &pubsub{
		c: c.c, cluster: c.cluster, sharded: sharded,
		sending:  make(chan struct{}, 1),
		channels: make(map[string]struct{}),
		events:   make(chan redisconn.Event, 64),
		done:     make(chan struct{}),
		ctx:      kctx, cancel: cancel,
	}
}

// lockSending takes the send semaphore, unless ctx ends first.
func (p *pubsub) lockSending(ctx context.Context) error {
	select {
	case p.sending <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pubsub) unlockSending() { <-p.sending }

// goOwned starts f as a goroutine that Close waits for, unless the pubsub is closed.
func (p *pubsub) goOwned(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.owned.Go(f)
	return true
}

// dial makes a dedicated connection with the pubsub's hooks. A Cluster client's connects on its
// first command, within that command's context. A single node's or Sentinel's connects at
// once, without a context, for as long as the client's Dialer.Timeout (5 s by default) when
// the server does not answer: that dial runs apart, so that ctx bounds the wait for it, and
// what it makes after ctx ended is closed.
func (p *pubsub) dial(ctx context.Context) (*link, error) {
	if p.cluster {
		dc, _ := p.c.Dedicate()
		return p.hook(dc), nil
	}
	made, abandoned := make(chan *link), make(chan struct{})
	started := p.goOwned(func() {
		dc, _ := p.c.Dedicate()
		l := p.hook(dc)
		select {
		case made <- l:
		case <-abandoned:
			l.close()
		}
	})
	if !started {
		return nil, rueidis.ErrClosing
	}
	select {
	case l := <-made:
		return l, nil
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	case <-p.done:
		close(abandoned)
		return nil, rueidis.ErrClosing
	}
}

// hook sets the pubsub's hooks on dc.
func (p *pubsub) hook(dc rueidis.DedicatedClient) *link {
	lost := dc.SetPubSubHooks(rueidis.PubSubHooks{
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
	return &link{dc: dc, lost: lost}
}

// emit hands e to Receive, unless the pubsub is closed.
func (p *pubsub) emit(e redisconn.Event) {
	select {
	case p.events <- e:
	case <-p.done:
	}
}

// connect makes the next connection, makes it the current one and starts its keeper; the
// caller holds sending.
func (p *pubsub) connect(ctx context.Context) (*link, error) {
	l, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		l.close()
		return nil, rueidis.ErrClosing
	}
	p.link = l
	p.owned.Go(func() { p.keep(l) })
	return l, nil
}

// drop closes l and forgets it, if it is still the current connection.
func (p *pubsub) drop(l *link) {
	p.mu.Lock()
	if p.link == l {
		p.link = nil
	}
	p.mu.Unlock()
	l.close()
}

// keep waits for l's connection to end, closes it, and — unless a Subscribe made the next one
// meanwhile, or there is nothing to subscribe — connects again and subscribes every channel,
// every resubscribeEvery until that succeeds or the pubsub closes.
func (p *pubsub) keep(l *link) {
	for range l.lost {
	}
	p.drop(l)
	for {
		select {
		case <-time.After(resubscribeEvery):
		case <-p.done:
			return
		}
		ctx, cancel := context.WithTimeout(p.ctx, resubscribeTimeout)
		err := p.reconnect(ctx)
		cancel()
		if err == nil {
			return // the new connection, if any, has a keeper of its own
		}
	}
}

// reconnect makes a new connection and subscribes every channel on it, if there is no
// connection and something to subscribe.
func (p *pubsub) reconnect(ctx context.Context) error {
	if err := p.lockSending(ctx); err != nil {
		return err
	}
	defer p.unlockSending()
	p.mu.Lock()
	idle := p.closed || p.link != nil || len(p.channels) == 0
	p.mu.Unlock()
	if idle {
		return nil
	}
	return p.subscribe(ctx, nil)
}

// subscribe sends the subscription of names on the current connection; without one, it makes
// one and subscribes every channel recorded. A connection the send fails on is dropped. The
// caller holds sending.
func (p *pubsub) subscribe(ctx context.Context, names []string) error {
	p.mu.Lock()
	l := p.link
	p.mu.Unlock()
	if l == nil {
		var err error
		if l, err = p.connect(ctx); err != nil {
			return err
		}
		p.mu.Lock()
		names = make([]string, 0, len(p.channels))
		for name := range p.channels {
			names = append(names, name)
		}
		p.mu.Unlock()
		if len(names) == 0 {
			return nil
		}
	}
	return p.send(ctx, l, true, names)
}

// send sends the (un)subscription of names on l, and drops l if that fails.
func (p *pubsub) send(ctx context.Context, l *link, subscribe bool, names []string) error {
	b := l.dc.B()
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
	err := l.dc.Do(ctx, cmd).Error()
	if err != nil {
		p.drop(l)
	}
	return err
}

func (p *pubsub) Subscribe(ctx context.Context, channels ...string) error {
	if err := p.lockSending(ctx); err != nil {
		return err
	}
	defer p.unlockSending()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return rueidis.ErrClosing
	}
	for _, ch := range channels {
		p.channels[ch] = struct{}{}
	}
	p.mu.Unlock()
	return p.subscribe(ctx, channels)
}

func (p *pubsub) Unsubscribe(ctx context.Context, channels ...string) error {
	if err := p.lockSending(ctx); err != nil {
		return err
	}
	defer p.unlockSending()
	p.mu.Lock()
	for _, ch := range channels {
		delete(p.channels, ch)
	}
	l := p.link
	closed := p.closed
	p.mu.Unlock()
	if closed || l == nil {
		// No connection: the next one will not subscribe them, and no acknowledgement comes.
		return errNotConnected
	}
	return p.send(ctx, l, false, channels)
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

// Close ends the connection, and waits for the keepers and for a dial that a Subscribe gave up
// waiting for (which ends within the client's Dialer.Timeout).
func (p *pubsub) Close() error {
	p.cancel() // a keeper's call ends
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	l := p.link
	p.link = nil
	p.mu.Unlock()
	if l != nil {
		l.close()
	}
	p.owned.Wait()
	return nil
}
