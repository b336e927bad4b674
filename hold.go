package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// keeper is what a hold needs of the Client that keeps it.
type keeper interface {
	clock() time.Time
	emit(Event)
	// holdEnded takes an ended hold out of the Client's map and off the watchdog.
	holdEnded(h *hold)
	// letGo releases, in the background, the handle hold of a hold lost while the store may
	// still have it, once renewing (the renewal on its way, or nil) is answered; a minimum
	// hold that ends at floor keeps the name taken until then.
	letGo(renewing <-chan struct{}, lease driver.Lease, hold string, floor time.Time)
	// watchLoss asks the backend to push word of a loss of lease (driver.LossWatcher).
	watchLoss(lease driver.Lease, lost func(error)) (stop func())
}

// hold is what a Client knows of one lock it holds for one owner: one lock in the store (owner
// and token name it), shared by every handle the owner obtained on it, with one validity
// deadline, one renewal at a time and one end. Every way a hold ends goes through this file:
//
//	live ──lose──▶ lost        (the store no longer has it, or its deadline passed)
//	live ──drop──▶ released    (the last handle was released)
//
// Each transition does its side effects itself: it stops the deadline timer, cancels every
// handle's context with the cause, takes the hold off the watchdog and out of the Client's
// map, and tells the observer. The deadline is armed by the hold: a timer closes Done when the
// validity passes, whoever else is looking.
//
// Locking: mu guards every field below it. The Client's mu and the watchdog's mu may be held
// while mu is taken, never taken while mu is held.
type hold struct {
	k           keeper // the Client that keeps it
	name, owner string
	limit       int // the semaphore's, for a permit; 0 for a lock
	token       int64
	watchdog    bool
	onLost      func(string, error)
	vctx        context.Context // the context of the Obtain that made the hold, for the observer
	obtained    time.Time
	fixedEvery  time.Duration // the renewal interval the caller chose; 0 for TTL/3
	capAt       time.Time     // WithMaxHold's end, from the grant's arrival, after which nothing extends the deadline; zero for none
	maxHold     time.Duration
	delay       time.Duration // WithLockDelay: the store keeps the lock this much longer than the Client trusts it
	expiry      *time.Timer   // fires at the deadline; set once, under mu (see arm)

	mu       sync.Mutex
	noMeta   bool // its first grant's request published no metadata, nor a Publish since
	phase    phase
	cause    error         // why the hold ended: a *lostError or releasedError
	ttl      time.Duration // the TTL renewals ask for: the longest any of its holds asked for, or Refresh's
	every    time.Duration // renewal interval for ttl
	deadline time.Time     // validity deadline on the Client's clock
	renewAt  time.Time     // when the watchdog renews next
	renewing chan struct{} // closed when the renewal in flight ends; nil when none is
	watchAt  time.Time     // when the watchdog asks the backend to push word of a loss; zero for never
	unwatch  func()        // ends that watch; nil while there is none
	refs     int           // handles not yet released
	floorAt  time.Time     // the latest WithMinHold end of its holds: a release before it leaves the lock held; zero for none
	settled  bool          // ended lost with its holds' release in the Client's hands (undo, keep or Close)
	reusable bool          // its owner may be reused once released: fresh, and never joined
	handles  []*lockContext
	handle0  [1]*lockContext // backs handles while there is one, as there usually is
}

type phase uint8

const (
	live phase = iota
	lost
	released
)

// arm starts the timer that ends a new hold at its deadline. The timer may fire before
// AfterFunc returns to store it: at once when the deadline has passed meanwhile (the holder's
// process was stopped after the grant's check), or whenever the scheduler runs its goroutine
// first. expire takes mu, so it waits for the store.
func (h *hold) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expiry = afterFunc(h.deadline.Sub(h.k.clock()), h.expire)
}

// capDeadline holds the deadline to the cap, if any, and stops renewals once the validity
// reaches it: a renewal could extend only the store's TTL, past the cap. h.mu is held, or h
// is not shared yet.
func (h *hold) capDeadline() {
	if h.capAt.IsZero() || h.deadline.Before(h.capAt) {
		return
	}
	h.deadline, h.renewAt = h.capAt, never
}

// never is a renewal time that does not come.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ended is the reason of a hold that its deadline, deadline, ended at now: the cap, or no
// confirmed renewal in time. The caller passes the deadline it read under h.mu: a renewal may
// be moving it.
func (h *hold) ended(now, deadline time.Time) error {
	if !h.capAt.IsZero() && !now.Before(h.capAt) {
		return fmt.Errorf("%w: %v after its grant", ErrMaxHold, h.maxHold)
	}
	return fmt.Errorf("%w %v ago without a confirmed renewal", errDeadlinePassed, now.Sub(deadline))
}

// trusted is how long after a send the Client trusts a lock the store keeps v after it: v less
// the drift allowance and the lock delay, which the store keeps beyond the Client's trust.
func trusted(v, delay time.Duration) time.Duration { return v - driver.Drift(v) - delay }

// afterFunc is time.AfterFunc; a test makes its timers fire early.
var afterFunc = time.AfterFunc

// enter adds a handle, ctx, to a live hold in one step, so that a hold that ends meanwhile
// cancels every handle it counts. The handle is another hold of the same lock in the store,
// asked for with ttl, and kept at least until floor (WithMinHold; zero for none). Renewals
// from now on ask for the longest TTL any hold asked for, so that none shortens what another
// one was granted. The deadline stays: only a renewal, which sets the store's TTL, moves it.
func (h *hold) enter(ctx *lockContext, ttl time.Duration, floor time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase != live {
		return false
	}
	h.refs++
	h.handles = append(h.handles, ctx)
	if floor.After(h.floorAt) {
		h.floorAt = floor
	}
	h.reusable = false // the store has more than one hold of it
	if ttl > h.ttl {
		h.ttl = ttl
		if h.fixedEvery == 0 {
			h.every = ttl / 3
		}
	}
	return true
}

// validUntil is the deadline: the hold is trusted until then.
func (h *hold) validUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// due tells the watchdog when the hold is next renewed, at which interval, and when its loss
// is next watched for (see watchLoss), and whether it is live.
func (h *hold) due() (renewAt, watchAt time.Time, every time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewAt, h.watchAt, h.every, h.phase == live
}

// pace tells the watchdog's plan when the hold is next renewed, at which interval, and whether
// a renewal of it is on its way.
func (h *hold) pace() (renewAt time.Time, every time.Duration, busy bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewAt, h.every, h.renewing != nil
}

// busy returns the renewal on its way, if any, and why the hold ended, if it did.
func (h *hold) busy() (renewing chan struct{}, cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewing, h.cause
}

// spare reports whether the hold's owner may serve the next acquisition of its name: the
// backend reuses owners, the hold was made for a fresh owner and had one handle, and it was
// released cleanly.
func (h *hold) spare() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reusable && h.phase == released
}

// err returns why the hold ended, or nil while it is live.
func (h *hold) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause
}

// valid reports whether the hold is still trusted, ending it when its deadline has passed. It
// reads the clock, so a holder that resumes from a pause sees the loss before any timer fires.
func (h *hold) valid() error {
	now := h.k.clock()
	h.mu.Lock()
	cause, deadline := h.cause, h.deadline
	h.mu.Unlock()
	if cause != nil || now.Before(deadline) {
		return cause
	}
	h.lose(h.ended(now, deadline))
	return h.err()
}

// expire is the deadline timer: it ends the hold, or waits on when the deadline moved.
func (h *hold) expire() {
	now := h.k.clock()
	h.mu.Lock()
	if h.phase != live {
		h.mu.Unlock()
		return
	}
	if left := h.deadline.Sub(now); left > 0 {
		h.expiry.Reset(left)
		h.mu.Unlock()
		return
	}
	reason := h.ended(now, h.deadline)
	h.mu.Unlock()
	h.lose(reason)
}

// setDeadline moves the deadline and its timer, never past the cap; h.mu is held.
func (h *hold) setDeadline(d time.Time) {
	if !h.capAt.IsZero() && d.After(h.capAt) {
		d = h.capAt
	}
	h.deadline = d
	h.expiry.Reset(max(d.Sub(h.k.clock()), 0))
}

// lease names the hold for the backend, with the TTL renewals ask for now.
func (h *hold) lease() driver.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return driver.Lease{Name: h.name, Owner: h.owner, TTL: h.ttl + h.delay, Token: h.token, Holds: h.refs, Limit: h.limit, NoMeta: h.noMeta}
}

// published records that the holder published metadata (Leadership.Proclaim): the release
// may have some to remove now.
func (h *hold) published() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noMeta = false
}

// claim makes ch the renewal in flight, if none is and the hold is live. The store sees one
// renewal of a hold at a time, so the last one confirmed is the last one that set its TTL.
func (h *hold) claim(ch chan struct{}) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase != live || h.renewing != nil {
		return false
	}
	h.renewing = ch
	return true
}

// unclaim ends the renewal ch; the caller closes ch.
func (h *hold) unclaim(ch chan struct{}) {
	h.mu.Lock()
	if h.renewing == ch {
		h.renewing = nil
	}
	h.mu.Unlock()
}

// renewed records a renewal sent at sent that asked for ttl and was confirmed, vouched for
// validity (the TTL when zero). The deadline is set from it, earlier or later than before:
// renewals do not overlap, and this one set the store's TTL last. refresh says it was a
// Refresh, whose TTL the hold keeps from now on. It reports whether the hold was still live.
func (h *hold) renewed(sent time.Time, ttl, validity time.Duration, refresh bool) (renewAt time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase != live {
		return time.Time{}, false
	}
	if refresh {
		h.ttl = ttl
		if h.fixedEvery == 0 {
			h.every = ttl / 3
		}
	}
	v := ttl + h.delay
	if validity > 0 && validity < v {
		v = validity
	}
	t := trusted(v, h.delay)
	h.setDeadline(sent.Add(t))
	h.renewAt = sent.Add(min(h.every, max(t, 0)/3))
	h.capDeadline()
	return h.renewAt, true
}

// mayHaveShortened lowers the deadline for a Refresh to ttl sent at sent, whose outcome is not
// known yet: the store may set the shorter TTL, so the lock is trusted no longer than that
// Refresh confirmed would be, until a renewal is confirmed. It returns when the watchdog
// should renew next, and false when the deadline did not move.
func (h *hold) mayHaveShortened(sent time.Time, ttl time.Duration) (renewAt time.Time, moved bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := sent.Add(trusted(ttl+h.delay, h.delay))
	if h.phase != live || !d.Before(h.deadline) {
		return time.Time{}, false
	}
	h.setDeadline(d)
	now := h.k.clock()
	h.renewAt = now.Add(max(d.Sub(now)/2, 0))
	return h.renewAt, true
}

// retrySoon schedules the next renewal after one whose outcome is unknown: soon, while the
// deadline leaves time.
func (h *hold) retrySoon() {
	now := h.k.clock()
	h.mu.Lock()
	h.renewAt = now.Add(min(h.every/4, h.deadline.Sub(now)/2))
	h.mu.Unlock()
}

// lose ends a live hold as lost, with reason.
func (h *hold) lose(reason error) { h.loseHandles(reason, false) }

// loseHandles is lose; it returns the handles it ended, none when the hold had ended before.
// closing says the Client's Close ends it, and releases its holds.
func (h *hold) loseHandles(reason error, closing bool) []*lockContext {
	// Lost by the Client's own deadline or cap: it ends its holds in the store itself, unless
	// a lock delay asks the store to keep the lock past the Client's trust (the store's TTL
	// ends it then; a Release still frees it at once).
	expired := (errors.Is(reason, errDeadlinePassed) || errors.Is(reason, ErrMaxHold)) && h.delay == 0
	h.mu.Lock()
	if h.phase != live {
		h.mu.Unlock()
		return nil
	}
	h.phase = lost
	h.cause = &lostError{reason: reason}
	// The Client ends its holds in the store itself (below, or Close does): a late Release
	// of one of its handles must not, or it would end in the store a lock kept for its
	// minimum hold.
	h.settled = expired || closing
	handles, renewing := h.end(), h.renewing
	h.mu.Unlock()
	h.off()
	for _, lc := range handles {
		lc.cancel(h.cause)
	}
	h.k.emit(Event{Kind: EventLost, Name: h.name, Token: h.token, Duration: h.k.clock().Sub(h.obtained), Err: h.cause, Owner: h.owner, Context: h.vctx, Holds: len(handles)})
	if h.onLost != nil {
		h.onLost(h.name, h.cause)
	}
	if expired {
		// Trusted no more, but maybe still in the store: a store whose session keeps what it
		// holds alive (etcd, ZooKeeper) keeps it as long as the Backend lives, whatever its
		// TTL. Its holds are released, as a closing Client's are; on a store that times them
		// out it is let go before its TTL ends.
		// A minimum hold still running keeps the name taken until it ends.
		lease, floor := h.lease(), h.floor()
		for _, lc := range handles {
			h.k.letGo(renewing, lease, lc.id, floor)
		}
	}
	return handles
}

// floor is when the hold's minimum hold ends; zero for none.
func (h *hold) floor() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.floorAt
}

// drop releases the handle ctx, and returns the renewal in flight, if any, for Release to wait
// for before it sends its own: a Refresh counted this handle among the holds it may cut short
// (driver.Lease.Holds), and must reach the store first. When it was the last handle, the hold ends as
// released. floor is when its minimum hold ends (zero for none), for the last handle and for
// any handle of a lost hold: a release before then leaves the lock held. wasLost says the
// hold was lost before: its EventLost counted this handle; settled that the Client ends its
// hold in the store itself.
func (h *hold) drop(ctx *lockContext) (renewing <-chan struct{}, wasLost, settled bool, floor time.Time) {
	h.mu.Lock()
	for i, lc := range h.handles {
		if lc == ctx {
			h.handles = append(h.handles[:i], h.handles[i+1:]...)
			break
		}
	}
	h.refs--
	if h.refs > 0 || h.phase != live {
		wasLost, settled = h.phase == lost, h.phase == lost && h.settled
		if wasLost {
			// Lost but not settled (under a lock delay, or lost as the store said): a late
			// release still keeps the name for the hold's minimum.
			floor = h.floorAt
		}
		renewing = h.renewing
		h.mu.Unlock()
		ctx.cancel(releasedError{})
		return renewing, wasLost, settled, floor
	}
	h.phase = released
	h.cause = releasedError{}
	handles := h.end()
	renewing, floor = h.renewing, h.floorAt
	h.mu.Unlock()
	h.off()
	ctx.cancel(releasedError{})
	for _, lc := range handles {
		lc.cancel(releasedError{})
	}
	return renewing, false, false, floor
}

// end stops the timer and takes the handles, as the hold ends; h.mu is held.
func (h *hold) end() []*lockContext {
	h.expiry.Stop()
	handles := h.handles
	h.handles = nil
	return handles
}

// off takes an ended hold off the watchdog and out of the Client's map, and ends its watch.
func (h *hold) off() {
	h.k.holdEnded(h)
	h.mu.Lock()
	stop := h.unwatch
	h.unwatch = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// watchLossAfter is how long a hold lives before the watchdog asks the backend to watch it
// for a loss: a hold released sooner, as most are, costs the store nothing more.
const watchLossAfter = 10 * time.Millisecond

// watchLoss asks the backend to push word of a loss of h; the watchdog's watch timer calls it
// once.
func (h *hold) watchLoss() {
	stop := h.k.watchLoss(h.lease(), h.lose)
	h.mu.Lock()
	if h.phase == live {
		h.unwatch, stop = stop, nil
	}
	h.mu.Unlock()
	if stop != nil {
		stop() // ended meanwhile
	}
}
