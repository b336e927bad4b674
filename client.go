package fencelock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Client obtains locks from one Backend. It runs one renewal goroutine for all the locks it
// holds, started with the first lock and stopped by Close. A Client is safe for concurrent use;
// create one per backend and share it.
type Client struct {
	b       Backend
	watcher ReleaseWatcher // nil when the backend cannot notify releases

	defaults       []Option
	now            func() time.Time
	observe        func(Event)
	cleanupTimeout time.Duration

	holdPrefix string
	holdSeq    atomic.Uint64

	sched *scheduler

	mu     sync.Mutex // guards held and closed
	held   map[holdKey]*holdState
	closed bool
}

type holdKey struct{ name, owner string }

// New returns a Client over b. A nil b gives a Client whose calls fail with ErrInvalid.
func New(b Backend, opts ...ClientOption) *Client {
	c := &Client{
		b:              b,
		now:            time.Now,
		cleanupTimeout: 2 * time.Second,
		held:           make(map[holdKey]*holdState),
	}
	if w, ok := b.(ReleaseWatcher); ok {
		c.watcher = w
	}
	for _, o := range opts {
		o(c)
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.holdPrefix = randomID(6) + "."
	c.sched = newScheduler(c)
	return c
}

// Close stops the renewal goroutine and waits until it is gone. Locks still held are not
// released: their contexts end with ErrLost and the store lets them expire. Close is
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
	states := make([]*holdState, 0, len(c.held))
	for _, st := range c.held {
		states = append(states, st)
	}
	c.mu.Unlock()
	c.sched.close()
	for _, st := range states {
		st.end(&lostError{reason: ErrClosed}, true)
	}
	return nil
}

// Inspect reports the state of the lock name as the backend sees it.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	if err := c.check(ctx, name); err != nil {
		return Info{}, err
	}
	return c.b.Inspect(ctx, name)
}

// Obtain obtains the lock name, waiting until it is free or ctx ends. While it waits it sleeps
// until the holder releases the lock (when the backend can tell) or the holder's TTL runs out,
// whichever is first. When ctx ends, the error matches both ErrNotObtained and ctx.Err().
//
// If ctx is the context of a lock on the same name obtained from this Client (lock.Context()
// or a context derived from it), the acquisition re-enters that lock.
func (c *Client) Obtain(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.obtain(ctx, name, true, opts)
}

// TryObtain makes one attempt to obtain the lock name. It fails with an error matching
// ErrNotObtained when someone else holds it.
func (c *Client) TryObtain(ctx context.Context, name string, opts ...Option) (*Lock, error) {
	return c.obtain(ctx, name, false, opts)
}

// Do obtains the lock name, runs fn under the lock's context and releases the lock. fn's
// context ends when the lock is lost or ctx ends. Do returns fn's error, or the error of
// obtaining or releasing the lock; when fn returned nil but the lock was lost while it ran,
// Do returns an error matching ErrLost, since fn's work may have overlapped another holder's.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil function")
	}
	lock, err := c.Obtain(ctx, name, opts...)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { lock.ctx.cancel(context.Cause(ctx)) })
	ferr := fn(lock.Context())
	stop()
	lostErr := lock.lostErr()
	rerr := lock.Release(context.WithoutCancel(ctx))
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

func (c *Client) check(ctx context.Context, name string) error {
	switch {
	case c == nil || c.b == nil:
		return invalidf("nil client or backend")
	case ctx == nil:
		return invalidf("nil context")
	case name == "":
		return invalidf("empty lock name")
	}
	return nil
}

// settingsPool recycles the settings that options are applied to: an option is a function
// that takes a pointer, so the settings it fills would otherwise escape to the heap on every
// acquisition.
var settingsPool = sync.Pool{New: func() any { return new(settings) }}

func (c *Client) settings(opts []Option) settings {
	p := settingsPool.Get().(*settings)
	*p = settings{ttl: DefaultTTL}
	for _, o := range c.defaults {
		o(p)
	}
	for _, o := range opts {
		o(p)
	}
	s := *p
	*p = settings{} // keep no caller's values alive in the pool
	settingsPool.Put(p)
	return s
}

// attempt makes one acquisition, or waits in line for it when queue is set. vctx carries the
// values the lock's context inherits. fresh says the owner ID was made for this acquisition
// alone: its only hold needs no ID of its own.
func (c *Client) attempt(ctx, vctx context.Context, name, owner string, fresh bool, s *settings, queue Queue) (*Lock, error) {
	hold := ""
	if !fresh {
		var buf [32]byte
		hold = string(strconv.AppendUint(append(buf[:0], c.holdPrefix...), c.holdSeq.Add(1), 36))
	}
	req := Request{Name: name, Owner: owner, Hold: hold, TTL: s.ttl, Meta: s.meta, Renewed: !s.noWatchdog}
	sent := c.now()
	var g Grant
	var err error
	if queue != nil {
		g, err = queue.AcquireQueued(ctx, req)
	} else {
		g, err = c.b.Acquire(ctx, req)
	}
	if err != nil {
		var held *HeldError
		if !errors.As(err, &held) && !errors.Is(err, ErrInvalid) {
			// The request may have reached the store and taken the lock: undo this hold.
			c.cleanup(Lease{Name: name, Owner: owner, TTL: s.ttl}, hold)
		}
		return nil, err
	}
	return c.grant(vctx, name, owner, hold, s, sent, g)
}

func (c *Client) cleanup(lease Lease, hold string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
	defer cancel()
	_, _ = c.b.Release(ctx, lease, hold)
}

func (c *Client) grant(vctx context.Context, name, owner, hold string, s *settings, sent time.Time, g Grant) (*Lock, error) {
	validity := s.ttl
	if g.Validity > 0 && g.Validity < validity {
		validity = g.Validity
	}
	sent = sent.Add(max(g.Elapsed, 0))
	deadline := sent.Add(validity - drift(s.ttl))
	if late := c.now().Sub(deadline); late >= 0 {
		// The reply took longer than the lock lives: whatever the store granted may be another
		// holder's by now. Undo it rather than hand out a lock that is already lost.
		c.cleanup(Lease{Name: name, Owner: owner, TTL: s.ttl}, hold)
		return nil, fmt.Errorf("%w: the grant of %q arrived %v after its validity had passed", ErrUnavailable, name, late)
	}
	// Renew at the configured interval, and the first time well within the validity the
	// backend vouched for, if that is the shorter: a lock handed over for a short claim gets
	// its whole TTL at its first renewal and is renewed at the usual pace afterwards.
	every := s.renewEvery

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.cleanup(Lease{Name: name, Owner: owner, TTL: s.ttl}, hold)
		return nil, ErrClosed
	}
	key := holdKey{name, owner}
	st := c.held[key]
	if st != nil && (g.Count <= 1 || !st.join(deadline)) {
		// The store says this is a first hold while we thought we held it: the old hold
		// vanished without the watchdog noticing yet.
		c.mu.Unlock()
		st.end(&lostError{reason: errors.New("the store no longer had the hold")}, true)
		c.mu.Lock()
		st = nil
	}
	var l *Lock
	if st == nil {
		// A first hold: the Lock and its state in one allocation.
		first := &struct {
			l  Lock
			st holdState
		}{}
		st, l = &first.st, &first.l
		*st = holdState{
			c: c, name: name, owner: owner, ttl: s.ttl, every: every,
			watchdog: !s.noWatchdog, onLost: s.onLost, token: g.Token,
			deadline: deadline, renewAt: sent.Add(min(every, validity/3)), refs: 1,
			obtained: sent,
		}
		st.handles = st.handle0[:0]
		c.held[key] = st
		c.mu.Unlock()
		c.sched.add(st)
	} else {
		c.mu.Unlock()
		l = new(Lock)
	}
	*l = Lock{c: c, st: st, hold: hold, count: g.Count, ttl: s.ttl}
	l.lctx = lockContext{parent: vctx, st: st}
	l.ctx = &l.lctx
	if !st.attach(l.ctx) {
		// Lost between join and attach: the hold in the store is useless now.
		l.released.Store(true)
		c.cleanup(Lease{Name: name, Owner: owner, TTL: s.ttl}, hold)
		return nil, st.errOrLost()
	}
	return l, nil
}

// forget removes st from the held map if it is still the current state for its key.
func (c *Client) forget(st *holdState) {
	c.mu.Lock()
	if c.held[holdKey{st.name, st.owner}] == st {
		delete(c.held, holdKey{st.name, st.owner})
	}
	c.mu.Unlock()
}

func (c *Client) emit(e Event) {
	if c.observe != nil {
		c.observe(e)
	}
}

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
