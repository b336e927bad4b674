package fencelock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"

	"github.com/fencelock/fencelock/internal/pause"
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
// session. Close does not close the Backend, which may serve other Clients. Close is
// idempotent.
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
		switch floor := h.floor(); {
		case len(handles) == 0:
		case c.now().Before(floor):
			// A minimum hold still running keeps the name taken until it ends.
			for _, lc := range handles {
				c.keepInBackground(lease, lc.id, floor, true)
			}
		default:
			c.releaseAll(lease, handles)
		}
	}
	c.background.Wait()
	return nil
}

// releaseAll releases, in the background, the holds of lease that the handles had when the
// Client closed.
func (c *Client) releaseAll(lease driver.Lease, handles []*lockContext) {
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		for _, lc := range handles {
			err := c.releaseHold(ctx, lease, lc.id)
			c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
		}
	}()
}

// Inspect reports the state of the lock name as the backend sees it.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	if err := c.check(ctx, name); err != nil {
		return Info{}, err
	}
	info, err := c.b.Inspect(ctx, name)
	return c.based(info), err
}

// Obtain obtains the lock name, waiting until it is free or ctx ends. While it waits it sleeps
// until the holder releases the lock (when the backend can tell) or the holder's TTL runs out,
// whichever is first. When ctx ends, the error matches both ErrNotObtained and ctx.Err(), and
// Obtain returns by ctx's deadline.
//
// While the store cannot be reached it keeps trying, and tells the observer (EventUnavailable,
// logged at warn level by WithLogger); if ctx ends while its attempts fail that way, the error
// matches ErrUnavailable too.
//
// If ctx is the context of a lock on the same name obtained from this Client (lock.Context()
// or a context derived from it), the acquisition re-enters that lock.
func (c *Client) Obtain(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.obtain(ctx, name, 0, true, opts)
}

// TryObtain makes one attempt to obtain the lock name. It fails with an error matching
// ErrNotObtained when someone else holds it. When the Client is still undoing, in the
// background, an earlier acquisition or release of name (its reply was lost), the attempt
// waits within ctx for that first: the Client's own leftover is no one else's hold.
func (c *Client) TryObtain(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.obtain(ctx, name, 0, false, opts)
}

// Do obtains the lock name, runs fn under the lock's context and releases the lock. fn's
// context ends when the lock is lost or ctx ends. Do returns fn's error, or the error of
// obtaining or releasing the lock; when fn returned nil but the lock was lost while it ran,
// Do returns an error matching ErrLost, since fn's work may have overlapped another holder's.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	return do(ctx, fn, func() (*Lock, error) { return c.Obtain(ctx, name, opts...) })
}

// do runs fn under the lock obtain obtains, as Client.Do says.
func do(ctx context.Context, fn func(ctx context.Context) error, obtain func() (*Lock, error)) error {
	if fn == nil {
		return invalidf("nil function")
	}
	lock, err := obtain()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { lock.lctx.cancel(context.Cause(ctx)) })
	ferr := fn(lock.Context())
	stop()
	lostErr := lock.lostErr()
	rctx, cancel := afterCall(ctx)
	rerr := lock.Release(rctx)
	cancel()
	switch {
	case ferr != nil:
		return ferr
	case lostErr != nil:
		return lostErr
	case errors.Is(rerr, ErrNotHeld):
		// The lock expired under fn without the client noticing in time.
		return &lostError{reason: rerr}
	}
	return rerr
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

// letGo releases a lost hold's handle in the background, kept until floor when that is still
// ahead (keeper).
func (c *Client) letGo(lease driver.Lease, hold string, floor time.Time) {
	if c.now().Before(floor) {
		c.keepInBackground(lease, hold, floor, false)
		return
	}
	c.undo(lease, hold)
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

// release ends one hold in the store within ctx: an attempt whose outcome is unknown is tried
// again with the same hold ID, and when ctx ends before one is confirmed, the background goes
// on with it. It reports clean when the first attempt released the last hold of the owner:
// the store has nothing of it left, and no request of it is unanswered.
func (c *Client) release(ctx context.Context, lease driver.Lease, hold string) (clean bool, err error) {
	for attempt := 0; ; attempt++ {
		var n int
		n, err = c.b.Release(ctx, lease, hold)
		switch {
		case err == nil:
			return attempt == 0 && n == 0, nil
		case errors.Is(err, ErrNotHeld):
			if attempt > 0 {
				return false, nil // an earlier attempt whose outcome was unknown released it
			}
			return false, err
		case errors.Is(err, ErrInvalid):
			return false, err
		}
		if attempt == 2 || !pause.For(ctx, 10*time.Millisecond<<(2*attempt)) {
			break
		}
	}
	c.undo(lease, hold)
	return false, err
}

// undo ends a hold in the store in the background, for at most the cleanup timeout: an
// acquisition that may have taken the lock but was not handed out, or a release not confirmed
// in time. A hold the store does not have is done. The outcome goes to the observer.
func (c *Client) undo(lease driver.Lease, hold string) {
	k := holdKey{name: lease.Name, permit: lease.Limit > 0}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.background.Add(1)
		u := c.undoing[k]
		if u == nil {
			u = &undos{done: make(chan struct{})}
			c.undoing[k] = u
		}
		u.n++
	}
	c.mu.Unlock()
	if closed {
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Err: ErrClosed, Owner: lease.Owner})
		return
	}
	go func() {
		defer c.background.Done()
		defer func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			u := c.undoing[k]
			if u.n--; u.n == 0 {
				close(u.done)
				delete(c.undoing, k)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		defer cancel()
		err := c.releaseHold(ctx, lease, hold)
		c.emit(Event{Kind: EventCleanup, Name: lease.Name, Token: lease.Token, Err: err, Owner: lease.Owner})
	}()
}

// releaseHold ends one hold in the store for clean-up, within ctx: a few tries, spaced out,
// since a store that cannot be reached now is often busy, and a flood of clean-up would keep
// it so. A hold the store does not have is done. What is left expires with its TTL.
func (c *Client) releaseHold(ctx context.Context, lease driver.Lease, hold string) error {
	var err error
	for _, wait := range undoWaits {
		if !pause.For(ctx, wait) {
			if err == nil {
				err = context.Cause(ctx)
			}
			return err
		}
		_, err = c.b.Release(ctx, lease, hold)
		if err == nil || errors.Is(err, ErrNotHeld) {
			return nil
		}
		if errors.Is(err, ErrInvalid) {
			return err
		}
	}
	return err
}

// undone waits, within ctx, until no undo of the name of k is left in the background: a fresh
// owner's acquisition would otherwise meet what the Client is still undoing of an earlier one,
// and be refused by its own leftover, or wait behind it in line.
func (c *Client) undone(ctx context.Context, k holdKey) error {
	c.mu.Lock()
	u := c.undoing[k]
	c.mu.Unlock()
	if u == nil {
		return nil
	}
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the undo of an earlier acquisition or release of %q by this Client: %w", k.name, context.Cause(ctx))
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
