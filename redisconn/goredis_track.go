package redisconn

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Track implements Tracker for a *redis.Client (a single node or a Sentinel failover client)
// and a *redis.ClusterClient; any other go-redis client gets ErrNoTracking.
//
// The session runs on a client of its own, made from the caller's options with RESP2, so
// that the caller's connections never change protocol or carry tracking state. Per master it
// keeps two connections: one subscribed to __redis__:invalidate, and one that reads with
// CLIENT TRACKING ON REDIRECT to the first. Whatever goes wrong with either — an error, a
// closed connection, a flush announced by a nil message, a PING of the reading connection
// unanswered after a quiet second (see trackPing) — ends both, and the next pair starts with
// changed(nil).
func (g *goRedis) Track(changed func(keys []string)) (Tracking, error) {
	t := &goRedisTracking{changed: changed, nodes: make(map[string]*trackNode)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	switch c := g.c.(type) {
	case *redis.Client:
		o := *c.Options()
		o.Protocol, o.OnConnect = 2, t.onConnect(o.OnConnect)
		o.PoolSize, o.MinIdleConns = 4, 0
		o.MaintNotificationsConfig = nil
		t.one = redis.NewClient(&o)
		t.closer = t.one
	case *redis.ClusterClient:
		o := *c.Options()
		o.Protocol, o.OnConnect = 2, t.onConnect(o.OnConnect)
		o.PoolSize, o.MinIdleConns = 4, 0
		o.MaintNotificationsConfig = nil
		t.cluster = redis.NewClusterClient(&o)
		t.closer = t.cluster
	default:
		return nil, ErrNoTracking
	}
	return t, nil
}

// invalidations is the channel a RESP2 connection hears tracking's invalidations on.
const invalidations = "__redis__:invalidate"

// goRedisTracking is one tracking session. Locking: mu guards nodes and closed.
type goRedisTracking struct {
	changed func([]string)
	one     *redis.Client        // the private client of a single node
	cluster *redis.ClusterClient // or of a Cluster
	closer  interface{ Close() error }
	ctx     context.Context // ends on Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex
	nodes  map[string]*trackNode // by master address
	closed bool
}

// idSlot, put in the context of a subscription, receives the client ID of the connection
// the subscription makes: OnConnect runs on it before it subscribes.
type idSlot struct{ id atomic.Int64 }

type idSlotKey struct{}

func (t *goRedisTracking) onConnect(user func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		if slot, ok := ctx.Value(idSlotKey{}).(*idSlot); ok {
			id, err := cn.ClientID(ctx).Result()
			if err != nil {
				return err
			}
			slot.id.Store(id)
		}
		return nil
	}
}

// node returns the session of key's master, starting it when it is new.
func (t *goRedisTracking) node(ctx context.Context, key string) (*trackNode, error) {
	c := t.one
	if t.cluster != nil {
		var err error
		if c, err = t.cluster.MasterForKey(ctx, key); err != nil {
			return nil, goRedisErr(err)
		}
	}
	addr := c.Options().Addr
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("redisconn: tracking session closed")
	}
	n := t.nodes[addr]
	if n == nil {
		n = &trackNode{t: t, c: c}
		t.nodes[addr] = n
		t.wg.Add(1)
		go n.run()
	}
	return n, nil
}

func (t *goRedisTracking) Read(ctx context.Context, reads []TrackedRead) {
	byNode := make(map[*trackNode][]int)
	for i := range reads {
		n, err := t.node(ctx, reads[i].Key)
		if err != nil {
			reads[i].Err = err
			continue
		}
		byNode[n] = append(byNode[n], i)
	}
	for n, idx := range byNode {
		n.read(ctx, reads, idx)
	}
	if t.cluster != nil && slices.ContainsFunc(reads, func(r TrackedRead) bool { return moved(r.Err) }) {
		// A slot moved, or its master is gone: the next reads go where the slots are now.
		t.cluster.ReloadState(ctx)
	}
}

// moved reports whether a read failed for want of the key's master: a MOVED or ASK reply, or
// no answer.
func moved(err error) bool {
	if err == nil || errors.Is(err, errNotTracking) {
		return false
	}
	if _, server := errors.AsType[*ServerError](err); server {
		return HasPrefix(err, "MOVED") || HasPrefix(err, "ASK")
	}
	return true
}

func (t *goRedisTracking) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	nodes := t.nodes
	t.mu.Unlock()
	t.cancel()
	for _, n := range nodes {
		n.breakOff()
	}
	t.wg.Wait()
	_ = t.closer.Close()
}

// trackNode is the session of one master: a pair of connections at a time, made anew by run
// after each end. Locking: mu guards tc and ps.
type trackNode struct {
	t *goRedisTracking
	c *redis.Client // the master, through the private client

	mu sync.Mutex // also serialises reads: a Conn is one connection
	tc *redis.Conn
	ps *redis.PubSub
}

var errNotTracking = errors.New("redisconn: the tracking session is not connected")

// read runs reads[idx] as one pipeline on the tracking connection.
func (n *trackNode) read(ctx context.Context, reads []TrackedRead, idx []int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tc == nil {
		for _, i := range idx {
			reads[i].Err = errNotTracking
		}
		return
	}
	cmds := make([]*redis.Cmd, len(idx))
	_, _ = n.tc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range idx {
			cmds[k] = p.Do(ctx, reads[i].Args...)
		}
		return nil
	})
	broken := false
	for k, i := range idx {
		reads[i].Reply, reads[i].Err = goRedisReply(cmds[k])
		if _, server := errors.AsType[*ServerError](reads[i].Err); reads[i].Err != nil && !server {
			broken = true
		}
	}
	if broken {
		// A read may not have reached the server, or its tracking: the pair is done.
		n.breakLocked()
	}
}

// breakOff ends the current pair.
func (n *trackNode) breakOff() {
	n.mu.Lock()
	n.breakLocked()
	n.mu.Unlock()
}

func (n *trackNode) breakLocked() {
	if n.ps != nil {
		_ = n.ps.Close() // ends the receive loop
	}
	if n.tc != nil {
		_ = n.tc.Close()
	}
	n.ps, n.tc = nil, nil
}

// run makes a pair, hears its invalidations until it ends, and makes the next, backing off
// while the server does not answer, until Close.
func (n *trackNode) run() {
	defer n.t.wg.Done()
	wait := 10 * time.Millisecond
	for n.t.ctx.Err() == nil {
		ps, err := n.connect()
		if err == nil {
			wait = 10 * time.Millisecond
			n.t.changed(nil)
			n.hear(ps)
			continue
		}
		if refused(err) {
			// CLIENT TRACKING unknown (Redis before 6) or denied (an ACL): the renewals stay.
			return
		}
		select {
		case <-time.After(wait):
		case <-n.t.ctx.Done():
		}
		wait = min(2*wait, time.Second)
	}
}

// refused reports whether err says the server will never hold the session: it does not know
// the command, or the user may not run it. Anything else (LOADING after a restart, a
// failover's READONLY, a dropped connection) is tried again.
func refused(err error) bool {
	se, ok := errors.AsType[*ServerError](err)
	if !ok {
		return false
	}
	return strings.HasPrefix(se.Msg, "NOPERM") || strings.Contains(strings.ToLower(se.Msg), "unknown")
}

// connect subscribes a connection to the invalidations and has a second one redirect its
// tracking there.
func (n *trackNode) connect() (*redis.PubSub, error) {
	slot := &idSlot{}
	ctx, cancel := context.WithTimeout(context.WithValue(n.t.ctx, idSlotKey{}, slot), 5*time.Second)
	defer cancel()
	ps := n.c.Subscribe(ctx)
	n.mu.Lock()
	n.ps = ps // for Close to end it, should the server not answer
	n.mu.Unlock()
	if err := ps.Subscribe(ctx, invalidations); err != nil {
		_ = ps.Close()
		return nil, goRedisErr(err)
	}
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		_ = ps.Close()
		return nil, goRedisErr(err)
	}
	id := slot.id.Load()
	if id == 0 {
		_ = ps.Close()
		return nil, errors.New("redisconn: the subscription's connection has no client ID")
	}
	tc := n.c.EphemeralConn()
	if err := tc.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err(); err != nil {
		_ = tc.Close()
		_ = ps.Close()
		return nil, goRedisErr(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ps != ps || n.t.ctx.Err() != nil {
		_ = tc.Close()
		_ = ps.Close()
		return nil, errors.New("redisconn: tracking session closed")
	}
	n.tc = tc
	return ps, nil
}

// trackPing is how long the subscription may stay quiet before the tracking connection is
// pinged. That connection is idle between reads, and its end would otherwise go unnoticed
// while the subscription lives: a server's idle timeout closes it (it spares subscribers), as
// does a CLIENT KILL, and the server then tracks nothing for the session.
const trackPing = time.Second

// hear passes on the invalidations of ps until ps fails or is closed, or the tracking
// connection stops answering, and ends the pair.
func (n *trackNode) hear(ps *redis.PubSub) {
	for {
		msg, err := ps.ReceiveTimeout(n.t.ctx, trackPing)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() && n.t.ctx.Err() == nil {
			if n.answers() {
				continue
			}
			break
		}
		if err != nil {
			// A nil message (the server flushed its keys) fails to parse, and lands here too.
			break
		}
		if m, ok := msg.(*redis.Message); ok && m.Channel == invalidations {
			keys := m.PayloadSlice
			if keys == nil {
				keys = []string{m.Payload}
			}
			n.t.changed(keys)
		}
	}
	n.mu.Lock()
	if n.ps == ps {
		n.breakLocked()
	}
	n.mu.Unlock()
}

// answers reports whether the pair's tracking connection answers a PING in time.
func (n *trackNode) answers() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tc == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(n.t.ctx, trackPing)
	defer cancel()
	return n.tc.Ping(ctx).Err() == nil
}

var _ Tracker = (*goRedis)(nil)
