package fencelock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

// An acquisition, from the call to the Lock, top to bottom: check the call, pick the owner,
// then one of three ways to get the lock — one attempt (TryObtain), waiting in the backend's
// line (Obtain on a driver.Queue), or attempts that wake on release (Obtain elsewhere, or WithRetry)
// — and turn the grant into a hold.

// unavailableBackoff spaces the attempts of a waiter while the backend cannot be reached.
var unavailableBackoff = [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, time.Second}

// request is one Obtain or TryObtain call.
type request struct {
	vctx  context.Context // the context given to Obtain: the values the lock's context carries
	name  string
	limit int // a semaphore's, for a permit; 0 for a lock
	owner string
	fresh bool // the owner was made for this call alone: its only hold needs no ID
	s     settings
	// waited: the call told EventWaiting; held: an attempt found the lock held by another, or
	// the line granted it after a wait
	waited, held bool
	waitedAt     time.Time // when it told EventWaiting
	store        storeState
}

// storeState is what a call's attempts found of the store: whether the last one that said
// anything of it reached it, and what the call told of that (EventUnavailable, EventAvailable).
type storeState struct {
	down      error     // that attempt's failure on the store; nil when it reached the store
	downSince time.Time // when its attempts began to fail
	toldAt    time.Time // when it last told EventUnavailable
	untold    int       // attempts failed since then
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

func (c *Client) obtain(ctx context.Context, name string, limit int, wait bool, opts []Option) (*Lock, error) {
	if err := c.check(ctx, name); err != nil {
		return nil, err
	}
	start := c.now()
	r := request{vctx: ctx, name: name, limit: limit, s: c.settings(opts)}
	if err := r.s.validate(); err != nil {
		return nil, err
	}
	if r.s.lockDelay > 0 && !c.expires {
		return nil, invalidf("WithLockDelay needs a store that ends a lock by its TTL: this backend's locks end with its session")
	}
	if limit > 0 && (r.s.weight < 0 || r.s.weight > limit) {
		return nil, invalidf("semaphore %q: weight %d: want 1 to the limit, %d", name, r.s.weight, limit)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if ctx.Err() != nil {
		return c.obtained(&r, start, nil, notObtainedBy(nil, ctx))
	}
	r.owner = r.s.owner
	if r.owner == "" {
		// A permit's context is no way back into it, but for an RWLock's: each Acquire takes
		// a permit of its own.
		if h := heldState(ctx, c, name); h != nil && h.limit == limit && (limit == 0 || r.s.reenter) && !r.s.fresh {
			r.owner = h.owner
		} else {
			r.owner, r.fresh = c.freshOwner(name, limit > 0), true
		}
	}
	if r.s.hasWait {
		if r.s.waitTimeout == 0 {
			wait = false
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, r.s.waitTimeout)
			defer cancel()
		}
	}
	if r.fresh {
		if err := c.undone(ctx, holdKey{name: name, permit: limit > 0}); err != nil {
			return c.obtained(&r, start, nil, notObtainedBy(err, ctx))
		}
	}
	var lock *Lock
	var err error
	switch {
	case !wait:
		lock, err = c.attempt(ctx, &r, nil)
	case c.queue != nil && r.s.retry == nil:
		lock, err = c.waitInLine(ctx, &r)
	default:
		lock, err = c.waitForRelease(ctx, &r)
	}
	if err != nil && ctx.Err() != nil {
		if r.store.down != nil && errors.Is(err, ctx.Err()) && !errors.Is(err, ErrUnavailable) {
			// The call ended while it waited between attempts or in the backend's line, which
			// says nothing of the store: the last attempt does. A call whose attempts failed
			// on the store is unavailable, not merely out of time. Otherwise the wait's own
			// error says what the call waited for.
			err = r.store.down
		}
		err = notObtainedBy(err, ctx)
	}
	return c.obtained(&r, start, lock, err)
}

// reached records what an attempt that ended with err found of the store, and tells the
// observer when the store goes out of reach (EventUnavailable, at most every UnavailableEvery)
// and when it comes back (EventAvailable).
func (c *Client) reached(ctx context.Context, r *request, err error) {
	st := &r.store
	switch {
	case errors.Is(err, ErrUnavailable):
		// An attempt the call's end cut short is one too: the store did not answer in time.
		now := c.now()
		if st.down == nil {
			st.downSince = now
		}
		st.down = err
		st.untold++
		if st.toldAt.IsZero() || now.Sub(st.toldAt) >= UnavailableEvery {
			c.emit(Event{Kind: EventUnavailable, Name: r.name, Duration: now.Sub(st.downSince), Err: err, Owner: r.owner, Context: r.vctx, Attempts: st.untold})
			st.toldAt, st.untold = now, 0
		}
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The call ended while it waited in the backend's line: nothing of the store.
	case st.down != nil: // told at its first failure
		c.emit(Event{Kind: EventAvailable, Name: r.name, Duration: c.now().Sub(st.downSince), Owner: r.owner, Context: r.vctx})
		*st = storeState{}
	}
}

// waitInLine waits in the backend's line; only failures to reach it are retried here.
func (c *Client) waitInLine(ctx context.Context, r *request) (*Lock, error) {
	for failures := 0; ; failures++ {
		lock, err := c.attempt(ctx, r, c.queue)
		if err == nil || !retryable(err) || !pause.For(ctx, backoff(failures)) {
			return lock, err
		}
	}
}

// waitForRelease attempts again each time the lock may have become free: when the backend
// announces a release, when the holder's TTL runs out, or at the intervals of WithRetry.
func (c *Client) waitForRelease(ctx context.Context, r *request) (*Lock, error) {
	lock, err := c.attempt(ctx, r, nil)
	if err == nil || !retryable(err) {
		return lock, err
	}
	c.waiting(r)
	// Subscribe, then attempt again at once: a release before the subscription is seen by
	// that attempt, and any release after it by the subscription. No wake-up is missed.
	var released <-chan struct{}
	if c.watcher != nil && r.s.retry == nil && r.limit == 0 {
		ch, stop, werr := c.watcher.WatchRelease(ctx, r.name)
		if werr == nil {
			defer stop()
			released = ch
			if lock, err = c.attempt(ctx, r, nil); err == nil || !retryable(err) {
				return lock, err
			}
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for {
		var sleep time.Duration
		var held *HeldError
		switch {
		case r.s.retry != nil:
			if sleep = r.s.retry.NextBackoff(); sleep <= 0 {
				return nil, err
			}
		case errors.As(err, &held):
			failures = 0
			sleep = pttlSleep(held.Remaining)
		default:
			sleep = backoff(failures)
			failures++
		}
		timer.Reset(sleep)
		slept := c.now()
		select {
		case <-released:
		case <-timer.C:
		case <-ctx.Done():
			return nil, err
		}
		c.emit(Event{Kind: EventWaited, Name: r.name, Duration: c.now().Sub(slept), Owner: r.owner, Context: r.vctx})
		if lock, err = c.attempt(ctx, r, nil); err == nil || !retryable(err) {
			return lock, err
		}
	}
}

// waiting tells the observer, once per call, that r begins to wait.
func (c *Client) waiting(r *request) {
	c.beginWait(&r.waited, &r.waitedAt, r.name, r.owner, r.vctx)
}

// beginWait tells the observer that a call begins to wait, unless *waited says it told so:
// it sets *waited, and *at to now.
func (c *Client) beginWait(waited *bool, at *time.Time, name, owner string, vctx context.Context) {
	if !*waited {
		*waited, *at = true, c.now()
		c.emit(Event{Kind: EventWaiting, Name: name, Owner: owner, Context: vctx})
	}
}

// lineWait is what a wait in the backend's line reports back to its call through
// driver.Request.Waiting: that the wait began (a grant is then a hand-over), and whether the
// call has told EventWaiting, and when (request.waited and waitedAt, copied in and out).
type lineWait struct {
	c           *Client
	name, owner string
	vctx        context.Context
	inLine      bool
	waited      bool
	waitedAt    time.Time
}

// begin is driver.Request.Waiting: the request waits behind another holder.
func (w *lineWait) begin() {
	w.inLine = true
	w.c.beginWait(&w.waited, &w.waitedAt, w.name, w.owner, w.vctx)
}

// attempt makes one acquisition, or waits in line for it when queue is set. A request that
// may have reached the store and taken the lock, but was not handed out, is undone in the
// background; the next attempt of a fresh owner then takes a new owner ID, so that the undo
// cannot end a lock that attempt re-enters.
func (c *Client) attempt(ctx context.Context, r *request, queue driver.Queue) (*Lock, error) {
	hold := ""
	if !r.fresh {
		var buf [32]byte
		hold = string(strconv.AppendUint(append(buf[:0], c.holdPrefix...), c.holdSeq.Add(1), 36))
	}
	req := driver.Request{Name: r.name, Owner: r.owner, Hold: hold, TTL: r.s.ttl + r.s.lockDelay, Meta: r.s.meta, Limit: r.limit, Weight: r.s.weight}
	if !r.fresh {
		req.Token = c.liveToken(r)
	}
	start := c.now()
	var g driver.Grant
	var err error
	inLine := false // the backend began to wait behind another holder: a grant is a hand-over
	if queue != nil {
		// The backend calls Waiting on this goroutine before AcquireQueued returns. The
		// callback holds a box of its own, made for a wait in line alone, not r: a closure
		// over r would put every call's request on the heap.
		w := &lineWait{c: c, name: r.name, owner: r.owner, vctx: r.vctx, waited: r.waited, waitedAt: r.waitedAt}
		req.Waiting = w.begin
		g, err = queue.AcquireQueued(ctx, req)
		inLine, r.waited, r.waitedAt = w.inLine, w.waited, w.waitedAt
	} else {
		g, err = c.b.Acquire(ctx, req)
	}
	var lock *Lock
	if err == nil {
		r.held = r.held || inLine // granted from the line after a wait
		if inLine {
			// The line's one wake: the grant, after its time in line.
			c.emit(Event{Kind: EventWaited, Name: r.name, Duration: c.now().Sub(r.waitedAt), Owner: r.owner, Context: r.vctx})
		}
		handedShort := inLine && g.Validity > 0 && g.Validity < req.TTL && r.s.noWatchdog
		if handedShort || r.s.lockDelay > 0 && g.Validity > 0 && trusted(min(g.Validity, req.TTL), r.s.lockDelay) <= 0 {
			// Handed over for a short claim (a Queue bounds what a waiter that died in line
			// holds), with no watchdog to extend it, or for one shorter than the lock delay:
			// renewed at once to the whole TTL before it is handed out, or it would be lost
			// before its TTL.
			sent := c.now()
			rn := c.b.Renew(ctx, []driver.Lease{{Name: r.name, Owner: r.owner, TTL: req.TTL, Token: g.Token, Limit: r.limit}})
			if len(rn) > 0 && rn[0].Err == nil {
				g.Elapsed, g.Validity = sent.Sub(start), rn[0].Validity
			}
		}
		lock, err = c.grant(r, hold, start, g)
	} else if held := (*HeldError)(nil); errors.As(err, &held) {
		r.held = true
	}
	c.reached(ctx, r, err)
	if err != nil {
		lease := driver.Lease{Name: r.name, Owner: r.owner, TTL: r.s.ttl, Token: g.Token, Limit: r.limit, NoMeta: r.s.meta == ""}
		switch {
		case err == errGrantedClosed:
			c.releaseNow(ctx, lease, hold)
		case mayHaveTaken(err):
			if !c.undo(nil, lease, hold) {
				c.releaseNow(ctx, lease, hold) // the Client closed during the call
			}
			if r.fresh {
				r.owner = newOwner()
			}
		}
	}
	return lock, err
}

// mayHaveTaken reports whether an acquisition that failed with err may still have taken the
// lock in the store: not when the store answered (held, invalid) unless the backend says it
// may hold it all the same (driver.MayHold), and not when the request never left (a refused
// connection, a closed Client).
func mayHaveTaken(err error) bool {
	var held *HeldError
	var op *net.OpError
	switch {
	case driver.StoreMayHold(err):
		return true
	case errors.As(err, &held), errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// liveToken returns the token of the owner's hold of r's name while the Client trusts it, for
// a re-entry's request (driver.Request.Token); 0 when it holds none.
func (c *Client) liveToken(r *request) int64 {
	c.mu.Lock()
	h := c.held[holdKey{r.name, r.owner, r.limit > 0}]
	c.mu.Unlock()
	if h == nil || h.valid() != nil {
		return 0
	}
	return h.token
}

// errGrantedClosed is a grant that arrived after the Client closed (a call that waited in
// line meanwhile): the attempt releases it.
var errGrantedClosed = fmt.Errorf("%w: the lock was granted after the Client closed, and is released", ErrClosed)

// errStale is a grant of a lock this owner holds with a later token: a reply that was
// overtaken by the owner's next lock. It was undone.
var errStale = errors.New("the store's grant was overtaken by a later lock of the same owner")

// grant turns a backend's grant, asked for at start, into a Lock: a handle of the owner's
// hold of that lock (same token), or of a new hold.
func (c *Client) grant(r *request, holdID string, start time.Time, g driver.Grant) (*Lock, error) {
	v := r.s.ttl + r.s.lockDelay
	if g.Validity > 0 && g.Validity < v {
		v = g.Validity
	}
	sent := start.Add(max(g.Elapsed, 0))
	deadline := sent.Add(trusted(v, r.s.lockDelay))
	if late := c.now().Sub(deadline); late >= 0 {
		// Whatever the store granted may be another holder's by now.
		return nil, fmt.Errorf("%w: the grant of %q arrived %v after its validity had passed", ErrUnavailable, r.name, late)
	}
	key := holdKey{r.name, r.owner, r.limit > 0}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errGrantedClosed
	}
	h := c.held[key]
	if h != nil && h.token != g.Token {
		c.mu.Unlock()
		if g.Token < h.token {
			return nil, fmt.Errorf("%w: %q: token %d, below the owner's %d: %w", ErrNotObtained, r.name, g.Token, h.token, errStale)
		}
		// The store made the owner a new lock: the one the Client knew of is gone.
		h.lose(fmt.Errorf("the store granted %q to this owner anew, with token %d", r.name, g.Token))
		c.mu.Lock()
		if h = c.held[key]; h != nil && h.token != g.Token {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %q: token %d is not the owner's %d", ErrNotObtained, r.name, g.Token, h.token)
		}
	}
	if h != nil {
		// Entered under the Client's mu, as Close takes the holds to release under it: a hold
		// that Close ends has this handle's hold in the store among them, or the grant sees
		// the Client closed.
		l := &Lock{c: c, h: h, hold: holdID, count: g.Count}
		l.lctx.init(r.vctx, h, holdID)
		entered := h.enter(&l.lctx, r.s.ttl, r.s.floor(sent))
		c.mu.Unlock()
		if !entered {
			// Lost since it was looked up (its deadline passed, or the store said so): the
			// attempt undoes this grant's hold (mayHaveTaken).
			return nil, h.err()
		}
		return l, nil
	}
	// A first hold: the Lock and its hold in one allocation.
	first := &struct {
		l Lock
		h hold
	}{}
	l, h := &first.l, &first.h
	*l = Lock{c: c, h: h, hold: holdID, count: g.Count}
	l.lctx.init(r.vctx, h, holdID)
	c.newHold(h, &l.lctx, r, g.Token, sent, deadline, v)
	c.held[key] = h
	c.mu.Unlock()
	if h.watchdog {
		c.dog.add(h)
	}
	return l, nil
}

// newHold makes h the hold of r's first grant, trusted until deadline, with its first handle,
// ctx, and arms its timer. h is not shared yet: its fields are set here, and the hold's own
// methods (hold.go) read and change them from then on.
func (c *Client) newHold(h *hold, ctx *lockContext, r *request, token int64, sent, deadline time.Time, validity time.Duration) {
	s := &r.s
	*h = hold{
		k: c, name: r.name, owner: r.owner, limit: r.limit, token: token, noMeta: s.meta == "", watchdog: !s.noWatchdog, vctx: r.vctx,
		onLost: s.onLost, obtained: sent, fixedEvery: s.renewEvery,
		ttl: s.ttl, every: s.every, deadline: deadline, refs: 1, reusable: c.reuse && r.fresh, delay: s.lockDelay,
		// A lock handed over for a short claim is renewed well within it the first time, and
		// at the usual pace once that renewal gave it its whole TTL.
		renewAt: sent.Add(min(s.every, max(validity-s.lockDelay, 0)/3)),
	}
	if s.maxHold > 0 {
		// From the grant's arrival, not its request's send: a reply that came late, or a
		// hand-over counted from the waiter's last renewal of its place in line, would
		// otherwise hand out a lock lost at once. The cap bounds a stuck holder; a reply's
		// latency does not matter to it.
		h.capAt, h.maxHold = c.now().Add(s.maxHold), s.maxHold
		h.capDeadline()
	}
	h.floorAt = s.floor(sent)
	if c.loss != nil && h.watchdog {
		h.watchAt = sent.Add(watchLossAfter)
	}
	h.handle0[0] = ctx
	h.handles = h.handle0[:1]
	h.arm()
}

func (c *Client) obtained(r *request, start time.Time, lock *Lock, err error) (*Lock, error) {
	if err != nil {
		c.emit(Event{Kind: EventNotObtained, Name: r.name, Duration: c.now().Sub(start), Err: err, Owner: r.owner, Context: r.vctx, Waited: r.waited})
		return nil, err
	}
	c.emit(Event{Kind: EventObtained, Name: r.name, Token: lock.h.token, Duration: c.now().Sub(start), Owner: r.owner, Context: r.vctx,
		Waited: r.waited, Handover: r.held && r.waited})
	return lock, nil
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

// retryable reports whether a waiter should try again after err.
func retryable(err error) bool {
	return !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrLost)
}

// backoff is how long a waiter waits after failures attempts that could not reach the store.
func backoff(failures int) time.Duration {
	return unavailableBackoff[min(failures, len(unavailableBackoff)-1)]
}

// pttlSleep is how long a waiter sleeps when no release notification comes: until the
// holder's TTL runs out, plus a little jitter so that waiters do not all retry together.
func pttlSleep(remaining time.Duration) time.Duration {
	if remaining <= 0 {
		return 50 * time.Millisecond
	}
	return remaining + rand.N(min(remaining/10, 20*time.Millisecond)+time.Millisecond)
}
