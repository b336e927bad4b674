package memorybackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Store is one store of locks, semaphores and elections, shared by the Backends it gives out.
// Its methods are safe for concurrent use. The zero value is not usable: call New.
//
// Locking: mu guards names and token. It is held for the length of one store operation, never
// while a caller waits, and never while a callback of a caller runs.
type Store struct {
	mu    sync.Mutex
	names map[string]*entry
	token int64 // the last token issued, for any name: tokens only grow
	// backends counts the Backends made, to number them.
	backends int
	// gate, when set before any call, is passed by each call before it reaches the store, and
	// returns when the call may go on: the deterministic simulation (sim_test.go) orders the
	// calls that arrive at one moment of virtual time by its seed.
	gate func(ctx context.Context, b *Backend, op, name string)
	// issued, when set, is told each token the store grants, under mu: the simulation checks
	// that a leader read was one the store made.
	issued func(name string, token int64)
	// traced, when set, is told each operation on a lock, under mu: the simulation's dump
	// shows what the store did with the name of a finding.
	traced func(op lockOp)
}

// lockOp is one operation on a lock, as traced: what was asked, what came of it, and the
// holder after it (owner "" when the lock is free).
type lockOp struct {
	at          time.Time
	kind, name  string // take, hand-over, renew, release, drop
	owner, hold string
	ttl         time.Duration
	refresh     bool
	holds       int // a renewal's driver.Lease.Holds
	err         error
	holder      string
	token       int64
	count       int
	expires     time.Time
}

// trace tells traced of op on e's lock, with the holder as it is now; s.mu is held.
func (s *Store) trace(e *entry, op lockOp) {
	op.name = e.name
	if h := e.lock; h != nil {
		op.holder, op.token, op.count, op.expires = h.owner, h.token, h.count(), h.expires
	}
	s.traced(op)
}

// New returns an empty Store.
func New() *Store { return &Store{names: make(map[string]*entry)} }

// entry is everything the Store keeps of one name: its lock, its semaphore's permits, and the
// line of each. A lock and a semaphore of the same name are unrelated, as on the real stores.
type entry struct {
	name string
	lock *holder // nil when free
	// lockLine and permitLine are the waiters, first come first.
	lockLine, permitLine []*waiter
	lockLast, permitLast int64 // the last token of the lock, of the semaphore
	permits              []*holder
	limit                int                   // the limit the permits' holders agreed on
	released             map[*watch]struct{}   // WatchRelease's watches
	losses               map[*lossWatch]string // WatchLoss's watches, to the owner they watch
	timer                *time.Timer           // fires at the first expiry; nil when none is due
	due                  time.Time             // when timer fires
}

// holder is the lock's holder, or a permit's.
type holder struct {
	owner   string
	token   int64
	holds   map[string]int // hold ID -> the permits that hold asked for (1 for a lock)
	weight  int            // the permits it takes: the most any of its holds asked for
	meta    string
	expires time.Time
}

func (h *holder) count() int { return len(h.holds) }

// waiter is a call waiting in a line.
type waiter struct {
	req   driver.Request
	start time.Time       // when the call began
	done  chan grantReply // the hand-over, or the refusal that ends the wait; buffered
}

type grantReply struct {
	g   driver.Grant
	err error
}

// Backend returns a Backend of the Store: what one Client uses, as a process has its own
// connection to a shared server. Faults (DropNextReply, DelayNextReply, Partition) are the
// Backend's alone.
func (s *Store) Backend() *Backend {
	s.mu.Lock()
	s.backends++
	id := s.backends
	s.mu.Unlock()
	return &Backend{s: s, id: id, closed: make(chan struct{})}
}

// get returns the entry of name, made when missing; s.mu is held.
func (s *Store) get(name string) *entry {
	e := s.names[name]
	if e == nil {
		e = &entry{name: name}
		s.names[name] = e
	}
	return e
}

// nextToken issues a token; s.mu is held.
func (s *Store) nextToken() int64 {
	s.token++
	return s.token
}

// effects are what a store operation owes to callers once s.mu is released: losses to push,
// release watches to wake.
type effects struct {
	lost  []func()
	wakes []*watch
}

func (f *effects) run() {
	for _, w := range f.wakes {
		w.wake()
	}
	for _, l := range f.lost {
		go l()
	}
}

// settle brings e up to now: it drops what expired, hands what is free to the waiters first in
// line, tells the watches, and arms the timer for the next expiry; s.mu is held.
func (s *Store) settle(e *entry, now time.Time, fx *effects) {
	if e.lock != nil && !now.Before(e.lock.expires) {
		s.dropLock(e, fx, errExpired)
	}
	for i := 0; i < len(e.permits); {
		if p := e.permits[i]; !now.Before(p.expires) {
			s.dropPermit(e, p, fx, errExpired)
			continue
		}
		i++
	}
	s.handOver(e, now)
	s.arm(e, now)
}

// finish settles e at the end of a store operation, and forgets it when nothing of it is left:
// no holder, no waiter, no watch and no token issued; s.mu is held. (An entry with a token
// stays: Inspect of a free name reports its last token, as Redis keeps a fence counter.)
func (s *Store) finish(e *entry, now time.Time, fx *effects) {
	s.settle(e, now, fx)
	if e.lock == nil && len(e.permits) == 0 && len(e.lockLine) == 0 && len(e.permitLine) == 0 &&
		len(e.released) == 0 && len(e.losses) == 0 && e.lockLast == 0 && e.permitLast == 0 {
		delete(s.names, e.name)
	}
}

var (
	errExpired  = fmt.Errorf("%w: memorybackend: its TTL ran out", driver.ErrNotHeld)
	errForced   = fmt.Errorf("%w: memorybackend: force-released", driver.ErrNotHeld)
	errForgot   = fmt.Errorf("%w: memorybackend: the store forgot it", driver.ErrNotHeld)
	errReleased = errors.New("released")
)

// dropLock removes the lock's holder for why, telling whoever watches it; s.mu is held.
func (s *Store) dropLock(e *entry, fx *effects, why error) {
	h := e.lock
	e.lock = nil
	if s.traced != nil {
		s.trace(e, lockOp{at: time.Now(), kind: "drop", owner: h.owner, token: h.token, err: why})
	}
	s.lost(e, h.owner, fx, why)
	for w := range e.released {
		fx.wakes = append(fx.wakes, w)
	}
}

// dropPermit removes p from the semaphore for why; s.mu is held.
func (s *Store) dropPermit(e *entry, p *holder, fx *effects, why error) {
	e.permits = slices.DeleteFunc(e.permits, func(q *holder) bool { return q == p })
	s.lost(e, permitKey(p.owner), fx, why)
}

// lost tells the loss watches of who (an owner, or permitKey of one) that it lost its hold,
// unless it was released; s.mu is held.
func (s *Store) lost(e *entry, who string, fx *effects, why error) {
	for w, owner := range e.losses {
		if owner == who {
			delete(e.losses, w)
			if why != errReleased {
				name := e.name
				fx.lost = append(fx.lost, func() { s.pass(context.Background(), nil, "lost", name); w.lost(why) })
			}
		}
	}
}

// permitKey names an owner's permit among the loss watches, apart from its lock.
func permitKey(owner string) string { return "\x00permit:" + owner }

// arm sets e's timer to the first expiry; s.mu is held.
func (s *Store) arm(e *entry, now time.Time) {
	var next time.Time
	if e.lock != nil {
		next = e.lock.expires
	}
	for _, p := range e.permits {
		if next.IsZero() || p.expires.Before(next) {
			next = p.expires
		}
	}
	switch {
	case next.IsZero():
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
	case e.timer == nil:
		name := e.name
		e.due = next
		e.timer = time.AfterFunc(next.Sub(now), func() { s.expireDue(name) })
	case !next.Equal(e.due):
		e.due = next
		e.timer.Reset(next.Sub(now))
	}
}

// pass waits at the gate, when there is one, for what is not a call of a Backend's but
// changes the store or a caller at a moment of its own: a timer's expiry, a pushed loss, a
// waiter that leaves when its context ends.
func (s *Store) pass(ctx context.Context, b *Backend, op, name string) {
	if s.gate != nil {
		s.gate(ctx, b, op, name)
	}
}

// expireDue is the timer of a name: what expired goes, and the line moves on.
func (s *Store) expireDue(name string) {
	s.pass(context.Background(), nil, "expire", name)
	var fx effects
	s.mu.Lock()
	if e := s.names[name]; e != nil {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		s.finish(e, time.Now(), &fx)
	}
	s.mu.Unlock()
	fx.run()
}

// Expire ends the lock of name now, as if its TTL had run out: its holder's context ends (the
// loss is pushed to it), and the first waiter in line gets the lock. It reports whether the
// lock was held.
func (s *Store) Expire(name string) bool {
	return s.change(name, func(e *entry, fx *effects) bool {
		if e.lock == nil {
			return false
		}
		s.dropLock(e, fx, errExpired)
		return true
	})
}

// ExpirePermit ends owner's permit of the semaphore name now, as if its TTL had run out. It
// reports whether owner held one.
func (s *Store) ExpirePermit(name, owner string) bool {
	return s.change(name, func(e *entry, fx *effects) bool {
		for _, p := range e.permits {
			if p.owner == owner {
				s.dropPermit(e, p, fx, errExpired)
				return true
			}
		}
		return false
	})
}

// ForgetName forgets the lock and the semaphore of name, as an eviction of their keys would:
// their holders lose them (the loss is pushed to them), and the waiters in line get them. The
// last tokens are kept, so that the next ones are greater.
func (s *Store) ForgetName(name string) {
	s.change(name, func(e *entry, fx *effects) bool { s.forget(e, fx); return true })
}

// Forget forgets every lock and semaphore, as a Redis restarted without persistence would. The
// waiters keep their places (a waiter of Redis joins again at its next attempt) and get what
// is free; tokens still grow.
func (s *Store) Forget() {
	s.mu.Lock()
	names := make([]string, 0, len(s.names))
	for n := range s.names {
		names = append(names, n)
	}
	s.mu.Unlock()
	slices.Sort(names)
	for _, n := range names {
		s.ForgetName(n)
	}
}

func (s *Store) forget(e *entry, fx *effects) {
	if e.lock != nil {
		s.dropLock(e, fx, errForgot)
	}
	for len(e.permits) > 0 {
		s.dropPermit(e, e.permits[0], fx, errForgot)
	}
}

// change runs fn on the entry of name under s.mu, then settles it and runs what is owed.
func (s *Store) change(name string, fn func(e *entry, fx *effects) bool) bool {
	var fx effects
	s.mu.Lock()
	now := time.Now()
	e := s.get(name)
	s.settle(e, now, &fx)
	ok := fn(e, &fx)
	s.finish(e, now, &fx)
	s.mu.Unlock()
	fx.run()
	return ok
}
