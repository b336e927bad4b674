package fencelock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Client obtains locks from one Backend. It runs one watchdog goroutine for all the locks it
// holds, started with the first lock, and clean-up in the background where a call's context
// did not leave time for it; Close stops both and waits for them. A Client is safe for
// concurrent use; create one per backend and share it.
//
// Close does not close the Backend, which may serve other Clients, and no Backend closes the
// store's client it was given: shut down in the reverse order of making them — the Client
// (which releases what it holds), then the Backend (every backend has a Close that ends its
// subscriptions, sessions or leases and waits for its own clean-up), then the store's client
// (a *redis.Client, a *clientv3.Client, a *zk.Conn) — so that each step's requests still
// reach the store.
type Client struct {
	// Locking: mu guards held, spare, undoing and closed. It may be held while a hold's mu is
	// taken.
	b       Backend
	watcher driver.ReleaseWatcher // nil when the backend cannot notify releases
	queue   driver.Queue          // nil when the backend keeps no line of waiters
	loss    driver.LossWatcher    // nil when the store cannot push word of a loss
	reuse   bool                  // the backend is an driver.OwnerReuser that reuses owners
	expires bool                  // the backend is an driver.Expirer whose locks go by their TTL

	defaults       []Option
	now            func() time.Time
	observe        func(Event)
	cleanupTimeout time.Duration
	tokenBase      int64 // added to every token handed out (WithTokenBase)
	err            error // an unusable ClientOption: every call returns it

	holdPrefix string
	holdSeq    atomic.Uint64

	dog        *watchdog
	background sync.WaitGroup // clean-up that outlives the call that started it

	mu    sync.Mutex
	held  map[holdKey]*hold
	spare map[holdKey][]string // owners of locks released cleanly, by name (owner "")
	// undoing: the undos in the background, by name (owner ""); done is closed when the last
	// of them ends
	undoing map[holdKey]*undos
	closed  bool
}

type undos struct {
	n    int
	done chan struct{}
}

type holdKey struct {
	name, owner string
	permit      bool // a semaphore's permit and a lock of the same name are apart
}

// New returns a Client over b. A nil b gives a Client whose calls fail with ErrInvalid.
func New(b Backend, opts ...ClientOption) *Client {
	c := &Client{
		b:              b,
		now:            time.Now,
		cleanupTimeout: 2 * time.Second,
		held:           make(map[holdKey]*hold),
		undoing:        make(map[holdKey]*undos),
	}
	c.watcher, _ = b.(driver.ReleaseWatcher)
	c.queue, _ = b.(driver.Queue)
	c.loss, _ = b.(driver.LossWatcher)
	if r, ok := b.(driver.OwnerReuser); ok && r.ReusesOwners() {
		c.reuse, c.spare = true, make(map[holdKey][]string)
	}
	if e, ok := b.(driver.Expirer); ok {
		c.expires = e.ExpiresByTTL()
	}
	for _, o := range opts {
		o(c)
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.holdPrefix = randomID(6) + "."
	c.dog = newWatchdog(c)
	return c
}

// Close stops the watchdog, releases the locks the Client still holds, and waits until that
// and the Client's other clean-up are done: at most the cleanup timeout (WithCleanupTimeout).
// The contexts of the locks still held end first, with an error matching ErrLost and
// ErrClosed; then their holds are released in the store, so that the next contender gets the
// name at once. This matters most on etcd and ZooKeeper, whose Backend keeps its session (and
// with it every key or node of it) alive for as long as the Backend is open: a lock the Client
// left there would be held for no one until the Backend closed. A hold whose release does not
// succeed within the cleanup timeout is left to expire with its TTL, or with the Backend's
// session. Close does not close the Backend, which may serve other Clients. A call in flight
// when Close begins goes on until its context ends or the store answers, and hands out no
// lock: one the store granted it meanwhile, or may have granted it (a call whose answer was
// lost), is released before it returns, and it fails with ErrClosed, or with the error of the
// lost answer. Close is idempotent.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	holds := make([]*hold, 0, len(c.held))
	for _, h := range c.held {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	c.dog.close()
	for _, h := range holds {
		lease := h.lease()
		handles := h.loseHandles(ErrClosed, true)
		// Read after the loss: no Refresh can claim the hold since, and one that claimed it
		// before holds its claim until it is answered.
		renewing, _ := h.busy()
		switch floor := h.floor(); {
		case len(handles) == 0:
		case c.now().Before(floor):
			// A minimum hold still running keeps the name taken until it ends.
			for _, lc := range handles {
				c.keepInBackground(renewing, lease, lc.id, floor, true)
			}
		default:
			c.releaseAll(lease, handles, renewing)
		}
	}
	c.background.Wait()
	return nil
}

// Inspect reports the state of the lock name as the backend sees it.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	if err := c.check(ctx, name); err != nil {
		return Info{}, err
	}
	info, err := c.b.Inspect(ctx, name)
	return c.based(info), err
}

// releaseGrace is how long the release that ends Do or Lead may go on once their context
// ended: within the slack the README allows past a deadline. A store that answers releases in
// a millisecond; one that does not leaves the release to the background (see Client.release).
const releaseGrace = 50 * time.Millisecond

// afterCall returns the context of the release that ends a call under ctx once its function
// returned: it carries ctx's values, and is not ended by ctx at once, so that a function that
// returned because ctx ended still has its lock released; but it ends releaseGrace after ctx
// does, so that the call returns by ctx's deadline plus the slack even when the store does not
// answer (etcd's client waits for a connection for as long as its context lets it).
func afterCall(ctx context.Context) (context.Context, context.CancelFunc) {
	var rctx context.Context
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		// A deadline too, for store clients that time their reads by it and do not watch
		// for a cancellation (go-redis with ContextTimeoutEnabled).
		rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d.Add(releaseGrace))
	} else {
		rctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	var mu sync.Mutex
	var grace *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		grace = time.AfterFunc(releaseGrace, cancel)
		mu.Unlock()
	})
	return rctx, func() {
		stop()
		mu.Lock()
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

func (c *Client) check(ctx context.Context, name string) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	if name == "" {
		return invalidf("empty lock name")
	}
	return nil
}

// ready says why c cannot make a call with ctx at all.
func (c *Client) ready(ctx context.Context) error {
	switch {
	case c == nil || c.b == nil:
		return invalidf("nil client or backend")
	case c.err != nil:
		return c.err
	case ctx == nil:
		return invalidf("nil context")
	}
	return nil
}

// forget removes h from the held map if it is still the hold of its name and owner.
// clock is the Client's clock (WithClock), for its holds (keeper).
func (c *Client) clock() time.Time { return c.now() }

// holdEnded takes an ended hold out of the map and off the watchdog (keeper).
func (c *Client) holdEnded(h *hold) {
	c.forget(h)
	c.dog.remove(h)
}

// watchLoss asks the backend to push word of a loss of lease (keeper).
func (c *Client) watchLoss(lease driver.Lease, lost func(error)) (stop func()) {
	return c.loss.WatchLoss(lease, lost)
}

func (c *Client) forget(h *hold) {
	c.mu.Lock()
	if key := (holdKey{h.name, h.owner, h.limit > 0}); c.held[key] == h {
		delete(c.held, key)
	}
	c.mu.Unlock()
}

func (c *Client) emit(e Event) {
	if c.observe != nil {
		if e.Token != 0 {
			e.Token += c.tokenBase
		}
		c.observe(e)
	}
}

// undoWaits are the pauses before each try of an undo.
var undoWaits = [...]time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond}

// randomID returns n ≤ 16 random bytes from crypto/rand, base64url encoded.
func randomID(n int) string {
	var b [16]byte
	var out [24]byte
	_, _ = rand.Read(b[:n]) // never fails on supported platforms
	base64.RawURLEncoding.Encode(out[:], b[:n])
	return string(out[:base64.RawURLEncoding.EncodedLen(n)])
}

// newOwner returns a fresh 128-bit owner ID.
func newOwner() string { return randomID(16) }

// Owners kept for reuse (see driver.OwnerReuser): at most spareEach per name, for at most spareNames
// names; past that an owner is not kept, and the next acquisition makes a new one.
const (
	spareEach  = 8
	spareNames = 1024
)

// freshOwner returns an owner ID for an acquisition of name with none of its own: one kept
// by spareOwner, when the backend reuses owners and one is kept, else a new one.
func (c *Client) freshOwner(name string, permit bool) string {
	if c.reuse {
		k := holdKey{name: name, permit: permit}
		c.mu.Lock()
		if s := c.spare[k]; len(s) > 0 {
			o := s[len(s)-1]
			if len(s) == 1 {
				delete(c.spare, k)
			} else {
				c.spare[k] = s[:len(s)-1]
			}
			c.mu.Unlock()
			return o
		}
		c.mu.Unlock()
	}
	return newOwner()
}

// spareOwner keeps the owner of h, released cleanly by its one handle, for the next
// acquisition of its name with a fresh owner: the store has nothing of it left, and no request
// of it is unanswered.
func (c *Client) spareOwner(h *hold) {
	if !h.spare() {
		return
	}
	k := holdKey{name: h.name, permit: h.limit > 0}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, found := c.spare[k]; !c.closed && len(s) < spareEach && (found || len(c.spare) < spareNames) {
		c.spare[k] = append(s, h.owner)
	}
}
