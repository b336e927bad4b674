package redlock

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/redisconn"
)

// Backend is a driver.Backend over N independent Redis nodes. It is safe for concurrent
// use. Close ends its release subscriptions and waits for the node calls still in flight.
type Backend struct {
	nodes  []*node
	all    []int // 0..N-1, the nodes every operation goes to
	quorum int   // N/2+1

	prefix      string
	retention   time.Duration
	nodeTimeout time.Duration // 0: per call, min(50ms, TTL/10)
	sharded     *bool         // nil: SPUBLISH on Cluster nodes only
	timeTokens  bool          // the server clock is a term of the token; off only in tests
	err         error         // set when the configuration is unusable; every call returns it

	ident identity

	mu        sync.RWMutex // guards closed against ops.Add
	closed    bool
	closeDone chan struct{}  // closed when the first Close has finished
	ops       sync.WaitGroup // operations under way (Acquire, Renew, ...)
	calls     sync.WaitGroup // node calls in flight, also those an operation stopped waiting for
	workers   *workers       // run the node calls
	flights   flights        // acquire calls that may still run after their Acquire returned
	turns     turns          // one owner's acquisitions of one lock, one at a time

	lastProposal atomic.Int64 // the last token proposed (see propose)
}

var (
	_ driver.Backend        = (*Backend)(nil)
	_ driver.ReleaseWatcher = (*Backend)(nil)
	_ driver.Namer          = (*Backend)(nil)
	_ driver.ForceReleaser  = (*Backend)(nil)
	_ driver.Expirer        = (*Backend)(nil)
)

// ExpiresByTTL implements driver.Expirer: the store lets a lock go when its TTL runs out.
func (b *Backend) ExpiresByTTL() bool { return true }

// node is one independent Redis deployment of the N.
type node struct {
	i        int
	c        redisconn.Conn
	addr     string
	announce any // how its release scripts announce a release: redislayer.Announce
	watch    *releasewatch.Set
}

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of every key, on every node. It must not contain '{' or '}'.
// Default: "fencelock:", the prefix of package redisbackend, so that tools that read one node
// (fencelock status, doctor) understand it.
func WithPrefix(p string) Option { return func(b *Backend) { b.prefix = p } }

// WithNodeTimeout bounds every call to one node. An operation stops waiting for a node after
// it and counts the node as failed; the call itself goes on until the go-redis client gives up
// (set ContextTimeoutEnabled on the clients so that this is at once). It must be small against
// the TTL: the TTL must exceed the node timeout plus the drift allowance. Default: per call,
// min(50ms, TTL/10).
func WithNodeTimeout(d time.Duration) Option { return func(b *Backend) { b.nodeTimeout = d } }

// WithFenceRetention sets how long a lock's fence counter outlives the acquisition that last
// wrote it, on each node. Default: 24h.
func WithFenceRetention(d time.Duration) Option { return func(b *Backend) { b.retention = d } }

// WithShardedPubSub chooses SPUBLISH/SSUBSCRIBE over PUBLISH/SUBSCRIBE for release
// notifications on every node. Default: sharded on nodes that are a Cluster,
// plain elsewhere.
func WithShardedPubSub(on bool) Option { return func(b *Backend) { b.sharded = &on } }

// New returns a Redlock backend over clients, one per independent Redis node (each may be a
// single server, a Sentinel-managed master or a Cluster). N = len(clients) must be odd and at
// least 3; the lock needs N/2+1 of them. An unusable configuration gives a Backend whose every
// call fails with an error matching driver.ErrInvalid.
//
// Two clients to the same server would make one server count twice. New refuses the same
// client twice; two different clients to one server can only be told apart by asking the
// servers, which the first acquisition does (INFO server run_id).
func New(clients []redisconn.Client, opts ...Option) *Backend {
	b := &Backend{prefix: "fencelock:", retention: 24 * time.Hour, timeTokens: true, workers: newWorkers(), closeDone: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o(b)
		}
	}
	b.err = b.configure(clients)
	return b
}

func (b *Backend) configure(clients []redisconn.Client) error {
	n := len(clients)
	switch {
	case n < 3:
		return fmt.Errorf("%w: redlock needs at least 3 nodes, got %d: with 1 or 2 a majority is every node, so one failure stops the lock and no failure is tolerated", driver.ErrInvalid, n)
	case n%2 == 0:
		return fmt.Errorf("%w: redlock needs an odd number of nodes, got %d: %d nodes tolerate no more failures than %d (a majority of %d is %d) and only add load", driver.ErrInvalid, n, n, n-1, n, n/2+1)
	case b.retention <= 0:
		return fmt.Errorf("%w: fence retention must be positive, got %v", driver.ErrInvalid, b.retention)
	case b.nodeTimeout < 0:
		return fmt.Errorf("%w: node timeout must be positive, got %v", driver.ErrInvalid, b.nodeTimeout)
	}
	if err := redislayer.CheckPrefix(b.prefix); err != nil {
		return err
	}
	conns := make([]redisconn.Conn, n)
	for i, c := range clients {
		if c == nil || isNilPointer(c) {
			return fmt.Errorf("%w: redlock client %d is nil", driver.ErrInvalid, i)
		}
		conn, err := redislayer.Open(c)
		if err != nil {
			return fmt.Errorf("redlock client %d: %w", i, err)
		}
		conns[i] = conn
		for j := range i {
			if sameValue(clients[j], c) {
				return fmt.Errorf("%w: redlock clients %d and %d are the same client: one node would count twice", driver.ErrInvalid, j, i)
			}
		}
	}
	b.quorum = n/2 + 1
	b.nodes = make([]*node, n)
	b.all = make([]int, n)
	for i, c := range conns {
		sharded := c.Cluster()
		if b.sharded != nil {
			sharded = *b.sharded
		}
		nd := &node{i: i, c: c, addr: c.String(), announce: redislayer.Announce(c.Cluster(), sharded)}
		nd.watch = releasewatch.New(nd.c, sharded)
		b.nodes[i], b.all[i] = nd, i
	}
	b.ident.ids = make([][]string, n)
	b.ident.known = make([]atomic.Bool, n)
	b.ident.turn = make(chan struct{}, 1)
	return nil
}

func isNilPointer(c redisconn.Client) bool {
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// sameValue reports whether a and b are the same client, without the panic that == raises on
// an interface holding an incomparable value.
func sameValue(a, b redisconn.Client) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Type() == vb.Type() && va.Comparable() && vb.Comparable() && va.Equal(vb)
}

// Nodes returns the number of nodes, N.
func (b *Backend) Nodes() int { return len(b.nodes) }

// Quorum returns the number of nodes a lock needs: N/2+1.
func (b *Backend) Quorum() int { return b.quorum }

// Key returns the key of the lock name on every node.
func (b *Backend) Key(name string) string { return redislayer.Key(b.prefix, name) }

// keys returns the lock's key and its fence counter's key.
func (b *Backend) keys(name string) []string {
	k := b.Key(name)
	return []string{k, k + ":fence"}
}

func (b *Backend) channelKey(name string) string { return b.Key(name) + ":released" }

// usable reports why name cannot be locked now: the Backend's configuration, the name
// (redislayer.CheckName), or two nodes found to be one server.
func (b *Backend) usable(name string) error {
	if b.err != nil {
		return b.err
	}
	if err := redislayer.CheckName(name); err != nil {
		return err
	}
	return b.ident.failed()
}

// late reports whether a grant or renewal confirmed elapsed after its requests were sent
// leaves no validity: the nodes keep the lock a TTL from then, and the Client trusts it for
// the TTL less the drift allowance (driver.Drift). Redlock refuses it by the Client's own rule,
// so that a lock it returns is one the Client can use.
func late(elapsed, ttl time.Duration) bool { return elapsed >= ttl-driver.Drift(ttl) }

// timeout returns the node timeout for a call with this TTL.
func (b *Backend) timeout(ttl time.Duration) time.Duration {
	if b.nodeTimeout > 0 {
		return b.nodeTimeout
	}
	if ttl <= 0 {
		return 50 * time.Millisecond
	}
	return max(min(50*time.Millisecond, ttl/10), time.Millisecond)
}

// checkTTL refuses a TTL that leaves no validity after one round of node calls.
func (b *Backend) checkTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: TTL must be positive, got %v", driver.ErrInvalid, ttl)
	case ttl%time.Millisecond != 0:
		return fmt.Errorf("%w: TTL %v is not a whole number of milliseconds", driver.ErrInvalid, ttl)
	case b.timeout(ttl)+driver.Drift(ttl) >= ttl:
		return fmt.Errorf("%w: TTL %v is too short for redlock: the node timeout %v and the drift allowance %v leave no validity", driver.ErrInvalid, ttl, b.timeout(ttl), driver.Drift(ttl))
	}
	return nil
}

// Close waits for the operations under way to return, ends the release subscriptions on every
// node and waits until the node calls still in flight have returned; calls made after Close
// fail with an error matching driver.ErrClosed. Close the Clients over the Backend first:
// their locks are not released. Close may be called more than once, also concurrently: every
// call returns once the first has finished.
func (b *Backend) Close() error {
	b.mu.Lock()
	first := !b.closed
	b.closed = true
	b.mu.Unlock()
	if !first {
		<-b.closeDone
		return nil
	}
	// An operation under way runs to its end: an acquisition cut off between its rounds would
	// leave its grants on the nodes, and a WatchRelease would subscribe on a node whose
	// subscriptions were ended already, with nothing left to end its own.
	b.ops.Wait()
	for _, n := range b.nodes {
		n.watch.Close()
	}
	b.calls.Wait()
	b.workers.close()
	close(b.closeDone)
	return nil
}

// begin registers an operation, unless the Backend is closed; the caller calls b.ops.Done
// when it returns. Node calls are made within operations only, so that none starts once
// Close has seen the operations end.
func (b *Backend) begin() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return errClosed
	}
	b.ops.Add(1)
	return nil
}

// reply is one node's answer in a fan-out.
type reply[T any] struct {
	node int
	v    T
	err  error
}

// fanOut runs call on each node of idx in a goroutine of its own, each bounded by timeout
// (none when timeout is 0: ctx alone), and hands every reply to settle in the caller's
// goroutine as it arrives. It is called within an operation (begin). It returns when every node has answered, when timeout passes or
// when ctx ends, with the nodes that had not answered then: their calls go on in the
// background until their own timeout ends them, and Close waits for them.
//
// Once settle reports that the outcome is decided, an operation (wait decide) returns at once:
// a slow or stopped node delays no outcome that a majority decided. The calls still running
// are the caller's to order against: a release waits for the acquire call on the same node
// (see flight). A read (wait read) waits a short grace more for the other nodes, as long as
// the decision took and at least graceMin, still handing their replies to settle: a majority
// of the nodes can lag an operation that returned, and a view of all of them shows its
// outcome, while a slow or stopped node delays the view by the grace only.
//
// A node's error arrives classified: ErrNodeTimeout when the node timeout ended it, ctx.Err()
// when ctx did, otherwise wrapped in driver.ErrUnavailable or driver.ErrInvalid.
func fanOut[T any](ctx context.Context, b *Backend, idx []int, timeout time.Duration, wait waiting,
	call func(ctx context.Context, n *node) (T, error), settle func(r reply[T]) bool) (pending []int) {
	b.calls.Add(len(idx)) // within an operation (begin), so before Close waits for calls
	start := time.Now()
	ch := make(chan reply[T], len(idx)) // buffered: a straggler never blocks
	// One context bounds every node's call: the calls start together, and one timer is
	// cheaper than one per node. The last call to return cancels it. A call runs on for a
	// while after the fan-out stopped waiting for it (the node timeout passed, or ctx ended):
	// a call cancelled mid-reply costs go-redis its connection, and under load the handshakes
	// of new connections made the next calls miss the node timeout in turn, so that no call
	// got through. Close waits for the calls.
	nctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		nctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), max(timeout, nodeLinger))
	}
	calls := &pendingCalls{cancel: cancel}
	calls.left.Store(int32(len(idx)))
	if len(idx) == 0 {
		cancel()
	}
	for _, i := range idx {
		n := b.nodes[i]
		ran := b.workers.run(func() {
			defer b.calls.Done()
			v, err := call(nctx, n)
			if err != nil {
				switch {
				case ctx.Err() != nil:
					err = ctx.Err()
				case nctx.Err() != nil || time.Since(start) >= timeout:
					err = ErrNodeTimeout
				default:
					err = classifyOnce(err)
				}
			}
			calls.done()
			ch <- reply[T]{node: n.i, v: v, err: err}
		})
		if !ran { // the workers are closed: no goroutine starts after Close
			b.calls.Done()
			calls.done()
			ch <- reply[T]{node: n.i, err: errClosed}
		}
	}
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	answered := make([]bool, len(b.nodes))
	decided := false
	for got := 0; got < len(idx); {
		select {
		case r := <-ch:
			got++
			answered[r.node] = true
			if settle(r) && got < len(idx) && !decided {
				if wait == decide {
					return unanswered(idx, answered)
				}
				decided = true
				grace := time.NewTimer(max(time.Since(start), graceMin))
				defer grace.Stop()
				expired = grace.C
			}
		case <-expired:
			return unanswered(idx, answered)
		case <-ctx.Done():
			return unanswered(idx, answered)
		}
	}
	return nil
}

// pendingCalls counts the node calls of a fan-out still running; the last cancels their context.
type pendingCalls struct {
	left   atomic.Int32
	cancel context.CancelFunc
}

// done counts one call as returned.
func (p *pendingCalls) done() {
	if p.left.Add(-1) == 0 {
		p.cancel()
	}
}

// waiting says how long fanOut waits once the outcome is decided.
type waiting bool

const (
	decide waiting = false // not at all
	read   waiting = true  // a grace for the other nodes
)

// nodeLinger is the least a node call has from its send, whatever the node timeout: it may
// run on after its fan-out stopped waiting for it (see fanOut).
const nodeLinger = 500 * time.Millisecond

// graceMin is the least a read waits for the other nodes once its outcome is decided.
const graceMin = 2 * time.Millisecond

func unanswered(idx []int, answered []bool) []int {
	var out []int
	for _, i := range idx {
		if !answered[i] {
			out = append(out, i)
		}
	}
	return out
}

// classifyOnce classifies err unless it is classified already.
func classifyOnce(err error) error {
	if isClassified(err) {
		return err
	}
	return redislayer.Classify(err)
}

func (b *Backend) nodeErr(i int, err error) *NodeError {
	return &NodeError{Node: i, Addr: b.nodes[i].addr, Err: err}
}

// timedOut returns the node errors of the nodes that did not answer in time: ErrNodeTimeout,
// or ctx's error when ctx ended.
func (b *Backend) timedOut(ctx context.Context, pending []int) []*NodeError {
	out := make([]*NodeError, 0, len(pending))
	for _, i := range pending {
		err := ErrNodeTimeout
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		out = append(out, b.nodeErr(i, err))
	}
	return out
}

// sendContext returns the context of a node call sent after waiting for the owner's call
// before it on the node (flight.wait): the node timeout from the send, and at least nodeLinger,
// whatever the wait took of ctx. A call sent with only what the wait left was cut off
// mid-reply, which costs go-redis the connection; under load the new connections' handshakes
// made the next calls wait and come late in turn, until hardly any reached a majority. A node
// timeout above nodeLinger is the node's to use: cut at nodeLinger, a node that answers within
// the timeout counted as failed. Close waits for the call all the same.
func sendContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), max(timeout, nodeLinger))
}

// cleanupContext returns a fresh context for the cleanup after a failed operation: not the
// caller's, which may have ended, but bounded.
func cleanupContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}
