package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

// Election is a leader election on the lock of its name, on any backend: the leader is the
// lock's holder, its term is the lock's fencing token (a store that fences with it refuses an
// old leader's writes), and the value it campaigned with is published with the lock
// (WithMetadata), for Leader and Observe to read. Leadership has everything a Lock has: the
// watchdog, a context that ends the moment it is lost, and a term that only grows.
type Election struct {
	c    *Client
	name string
	opts []Option

	mu      sync.Mutex                // guards running
	running map[*runningTerm]struct{} // the terms whose fn a Lead of this Election runs now
}

// runningTerm is a term whose fn runs, and when its context ended (zero while it has not).
type runningTerm struct {
	l     *Leadership
	ended time.Time // guarded by Election.mu; set by the first to see the term ended
}

// Election returns the election name. opts apply to every Campaign (WithTTL, WithWatchdog...);
// WithOwner and WithMetadata are the election's to set, and are ignored.
func (c *Client) Election(name string, opts ...Option) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Leadership is a term of office won by Campaign. It is safe for concurrent use.
type Leadership struct {
	lock  *Lock
	mu    sync.Mutex // guards value
	value string
}

// Leader is who leads an election, as its backend sees it.
type Leader struct {
	// Elected says whether anyone leads; the other fields are zero when no one does.
	Elected bool
	// Term is the leader's term: its lock's fencing token.
	Term int64
	// Value is what the leader campaigned with.
	Value string
	// Owner is the owner ID of the leader's lock.
	Owner string
	// Remaining is the leader's lock's time to live, as the backend reported it.
	Remaining time.Duration
}

// Campaign waits until this caller leads, or ctx ends; value is published as the leader's, up
// to MaxMetadata bytes. Contenders are served first come, first served on a backend that keeps
// a line (Redis, etcd, ZooKeeper). A Campaign whose context ends leaves nothing behind: the
// error matches ErrNotObtained and ctx.Err(). A leadership won in a store but known too late to
// be trusted (it may have lapsed meanwhile) is given up, never returned.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	opts := append(append([]Option{}, e.opts...), WithMetadata(value), func(s *settings) { s.owner, s.fresh = "", true })
	lock, err := e.c.obtain(ctx, e.name, 0, true, opts)
	if err != nil {
		return nil, err
	}
	if e.c.observe != nil {
		elected := e.c.now()
		ev := Event{Name: e.name, Token: lock.Token(), Owner: lock.Owner()}
		e.c.emit(Event{Kind: EventElected, Name: ev.Name, Token: ev.Token, Owner: ev.Owner, Context: ctx})
		context.AfterFunc(lock.Context(), func() {
			ev.Kind, ev.Duration = EventTermEnded, e.c.now().Sub(elected)
			if cause := context.Cause(lock.Context()); errors.Is(cause, ErrLost) || errors.Is(cause, ErrClosed) {
				ev.Err = cause
			}
			e.c.emit(ev)
		})
	}
	return &Leadership{lock: lock, value: value}, nil
}

// Context returns a context that ends when the leadership ends: lost (its cause matches
// ErrLost), resigned, or the Client closed. It carries the values of Campaign's context.
func (l *Leadership) Context() context.Context { return l.lock.Context() }

// Term returns the term: the fencing token of the leadership's lock.
func (l *Leadership) Term() int64 { return l.lock.Token() }

// Value returns what the leader campaigned with, or proclaimed since.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Proclaim publishes value as the leader's in place of what it campaigned with, up to
// MaxMetadata bytes, without a new election: the term stays, and Leader and Observe see the
// new value (etcd's Proclaim). It fails with the term's error (matching ErrLost or ErrNotHeld)
// when the leadership is no longer valid, or the store says it ended; with one matching ErrInvalid and
// errors.ErrUnsupported on a backend that cannot change a held lock's value (Redlock: it is
// not a driver.Publisher). When it fails otherwise (ErrUnavailable), the store may hold either value.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if l == nil || l.lock == nil {
		return fmt.Errorf("%w: nil leadership", ErrNotHeld)
	}
	if ctx == nil {
		return invalidf("nil context")
	}
	if len(value) > MaxMetadata {
		return invalidf("metadata of %d bytes is longer than the maximum %d", len(value), MaxMetadata)
	}
	p, ok := l.lock.c.b.(driver.Publisher)
	if !ok {
		return errNoPublish
	}
	if err := l.lock.Valid(); err != nil {
		return err
	}
	h := l.lock.h
	h.published() // from now on the release may have metadata to remove
	if err := p.Publish(ctx, h.lease(), value); err != nil {
		return err
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// Valid reports whether the leadership can still be trusted, as Lock.Valid does.
func (l *Leadership) Valid() error { return l.lock.Valid() }

// Lock returns the leadership's lock, for what a Lock offers beyond Leadership (Refresh,
// ValidUntil).
func (l *Leadership) Lock() *Lock { return l.lock }

// Resign ends the leadership, as Lock.Release ends a lock: the next contender in line leads
// next. A Resign whose outcome is unknown is retried in the background with the same hold, so
// a failed request never leaves a leader behind for longer than its TTL.
func (l *Leadership) Resign(ctx context.Context) error { return l.lock.Release(ctx) }

// Leader reads who leads now.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	info, err := e.c.Inspect(ctx, e.name)
	if err != nil || !info.Held {
		return Leader{}, err
	}
	return Leader{Elected: true, Term: info.Token, Value: info.Meta, Owner: info.Owner, Remaining: info.Remaining}, nil
}

// Candidate is a contender of an election: its leader, or one waiting in line to lead.
type Candidate struct {
	// Owner is the owner ID of the contender's lock or place in line.
	Owner string
	// Value is what it campaigned with (or, for the leader, proclaimed since).
	Value string
	// Leader says it leads; Term is then its term, and zero otherwise.
	Leader bool
	Term   int64
}

// Candidates lists who campaigns now: the leader first, if any, then the contenders waiting
// in line, first in line first (Curator's participants). The leader and the line are read one
// after the other, not at one instant. A backend that keeps no line it can list (Redlock; it
// is not a driver.LineLister) lists the leader alone, and says so with an error matching ErrInvalid
// and errors.ErrUnsupported beside it. A contender that waits under WithRetry, outside the
// line, is not listed.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	if err := e.c.check(ctx, e.name); err != nil {
		return nil, err
	}
	var out []Candidate
	l, err := e.Leader(ctx)
	if err != nil {
		return nil, err
	}
	if l.Elected {
		out = append(out, Candidate{Owner: l.Owner, Value: l.Value, Leader: true, Term: l.Term})
	}
	ll, ok := e.c.b.(driver.LineLister)
	if !ok {
		return out, errNoLine
	}
	line, err := ll.Line(ctx, e.name)
	if err != nil {
		return out, err
	}
	for _, w := range line {
		if w.Owner != l.Owner {
			out = append(out, Candidate{Owner: w.Owner, Value: w.Meta})
		}
	}
	return out, nil
}

// ObserveInterval is how often Observe looks when nothing wakes it sooner, on a backend that
// does not push word of every change (see Observe).
const ObserveInterval = 250 * time.Millisecond

// Observe sends who leads now, and then each change it sees — a new term, no leader, or a new
// value (Leadership.Proclaim) — until ctx ends, when it closes the channel.
//
// On a backend that pushes word of a change of holder (a driver.HolderWatcher: Redis, etcd,
// ZooKeeper, memorybackend), Observe looks when the store tells it: a release, a hand-over to
// the next in line or a new value is seen at once, and a hand-over is reported as the next
// term, with no "no leader" before it. Where the store does not push every change (Redis and
// memorybackend: an expiry, the acquisition of a free lock, a Redis key removed by hand or lost
// in a failover), Observe also looks when the leader's TTL runs out and every ObserveInterval;
// where it does (etcd, ZooKeeper), it looks only when told. On any other backend it looks when the backend
// announces a release, when the leader's TTL runs out, and every ObserveInterval. A change
// between two looks is seen at the next one, and a term that began and ended between two
// looks is not reported. Terms never go back: a read of a term lower than one sent already (a
// lagging replica, a quorum read that met a minority) is stale, and is not sent. A failure to
// read sends nothing and is tried again; it never ends the stream. Observe fails only when the
// call itself is unusable (a nil Client or context, an empty name).
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if err := e.c.check(ctx, e.name); err != nil {
		return nil, err
	}
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		var changed <-chan struct{}
		pushed, pushesAll := false, false // a driver.HolderWatcher's watch, and whether it tells all
		if hw, ok := e.c.b.(driver.HolderWatcher); ok {
			if ch, stop, err := hw.WatchHolder(ctx, e.name); err == nil {
				defer stop()
				changed, pushed, pushesAll = ch, true, hw.PushesAcquisitions()
			}
		}
		if !pushed && e.c.watcher != nil {
			if ch, stop, err := e.c.watcher.WatchRelease(ctx, e.name); err == nil {
				defer stop()
				changed = ch
			}
		}
		timer := time.NewTimer(0)
		defer timer.Stop()
		last, sent := Leader{}, false
		var top int64 // the greatest term sent: a read of a lower one is stale, and not sent
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-timer.C:
			}
			next := ObserveInterval
			l, err := e.Leader(ctx)
			if err == nil && !(l.Elected && l.Term < top) {
				if !sent || l.Elected != last.Elected || l.Term != last.Term || l.Value != last.Value {
					select {
					case out <- l:
					case <-ctx.Done():
						return
					}
					last, sent = l, true
					top = max(top, l.Term)
				}
				switch {
				case pushesAll:
					next = 0 // the store tells of every change
				case l.Remaining > 0:
					next = min(next, l.Remaining+time.Millisecond)
				}
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			if next > 0 {
				timer.Reset(next)
			}
		}
	}()
	return out, nil
}

// OnNewLeader calls fn with who leads now, and then with each change Observe reports — a new
// term, no leader, a new value — from one goroutine, one call at a time, until ctx ends or
// stop is called: every instance of a service can follow who leads (client-go's
// OnNewLeader), whether it campaigns or not. stop waits for a call of fn under way, and no
// call follows it; it is safe to call more than once, but not from fn. A nil fn is an error matching ErrInvalid.
func (e *Election) OnNewLeader(ctx context.Context, fn func(Leader)) (stop func(), err error) {
	if fn == nil {
		return nil, invalidf("nil function")
	}
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	octx, cancel := context.WithCancel(ctx)
	seen, err := e.Observe(octx)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l := range seen {
			if octx.Err() == nil { // none after stop, or once ctx ended
				fn(l)
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}

// Lead runs fn while this caller leads, and campaigns again whenever a term is lost, until ctx
// ends: the shape of a daemon where one instance of many does the work. fn gets the term's
// context, which ends when the term is lost or ctx ends, and the term. Lead resigns after
// every term. It returns ctx's error when ctx ends, and fn's return when fn returned while it
// still led: nil for work that is done, an error for work that failed. A failure to campaign
// that may pass (the backend out of reach) is retried, and told to the observer
// (EventUnavailable); when ctx ends while campaigns fail that way, the error matches both ctx's
// error and ErrUnavailable.
func (e *Election) Lead(ctx context.Context, value string, fn func(ctx context.Context, term int64) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	for failures := 0; ; {
		l, err := e.Campaign(ctx, value)
		switch {
		case ctx.Err() != nil:
			if err == nil {
				// Won as ctx ended: a term no one runs would be renewed for as long as the
				// Client lives, and keep every other contender out.
				rctx, cancel := afterCall(ctx)
				_ = l.Resign(rctx)
				cancel()
			}
			return endedBy(ctx, err)
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
			return err
		case err != nil:
			if !pause.For(ctx, backoff(failures)) {
				return endedBy(ctx, err)
			}
			failures++
			continue
		}
		failures = 0
		// fn runs under the term's own context, which reads the clock: a leader resuming from
		// a pause past its term sees the loss on its next check, before any timer fires. A
		// context wrapped around it would not, until the hold's timer ran.
		stop := context.AfterFunc(ctx, func() { l.lock.lctx.cancel(context.Cause(ctx)) })
		done := e.runs(l)
		ferr := fn(l.Context(), l.Term())
		done()
		stop()
		lost := l.lock.lostErr()
		rctx, cancel := afterCall(ctx)
		_ = l.Resign(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case lost == nil:
			return ferr
		}
		// Lost: campaign again.
	}
}

// endedBy is Lead's error when ctx ended while it campaigned and the last campaign failed with
// err: ctx's error, which also matches err when that campaign could not reach the store.
func endedBy(ctx context.Context, err error) error {
	switch {
	case err == nil || !errors.Is(err, ErrUnavailable):
		return ctx.Err()
	case errors.Is(err, ctx.Err()):
		return err
	}
	return &bothError{err, ctx.Err()}
}

// Proclaim publishes value as the leader's for the term a Lead of this Election runs now, as
// Leadership.Proclaim does: for a Lead's fn, which has no Leadership. A later term of the Lead
// campaigns with the Lead's value again. It fails with an error matching ErrNotHeld when no
// Lead of this Election runs a term.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	e.mu.Lock()
	var l *Leadership
	for r := range e.running {
		if l == nil || r.l.Term() > l.Term() {
			l = r.l
		}
	}
	e.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: election %q: no Lead of this Election runs a term", ErrNotHeld, e.name)
	}
	return l.Proclaim(ctx, value)
}

// runs records that fn runs for the term of l until the returned func is called, for Healthy.
func (e *Election) runs(l *Leadership) (done func()) {
	r := &runningTerm{l: l}
	e.mu.Lock()
	if e.running == nil {
		e.running = make(map[*runningTerm]struct{})
	}
	e.running[r] = struct{}{}
	e.mu.Unlock()
	stop := context.AfterFunc(l.Context(), func() {
		now := e.c.now()
		e.mu.Lock()
		if r.ended.IsZero() {
			r.ended = now
		}
		e.mu.Unlock()
	})
	return func() {
		stop()
		e.mu.Lock()
		delete(e.running, r)
		e.mu.Unlock()
	}
}

// Healthy returns nil unless a Lead of this Election still runs its function for a term that
// ended more than tolerance ago: the function ignored its context, and this process may act as
// leader beside the next one (client-go's leader health check). It is meant for a liveness
// check that restarts such a process:
//
//	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
//		if err := election.Healthy(10 * time.Second); err != nil {
//			http.Error(w, err.Error(), http.StatusInternalServerError)
//		}
//	})
//
// The error matches ErrLost. A term ends when it is lost, resigned or its Lead's context ends;
// one whose validity passed while the process was paused counts from its validity deadline. Healthy reads the clock and
// makes no call; it is safe for concurrent use. A negative tolerance is an error matching
// ErrInvalid.
func (e *Election) Healthy(tolerance time.Duration) error {
	if tolerance < 0 {
		return invalidf("negative health tolerance %v", tolerance)
	}
	e.mu.Lock()
	terms := make([]*runningTerm, 0, len(e.running))
	for r := range e.running {
		terms = append(terms, r)
	}
	e.mu.Unlock()
	now := e.c.now()
	for _, r := range terms {
		if r.l.Valid() == nil {
			continue
		}
		e.mu.Lock()
		if r.ended.IsZero() {
			r.ended = now // ended before its AfterFunc ran
		}
		ended := r.ended
		e.mu.Unlock()
		if until := r.l.lock.ValidUntil(); until.Before(ended) {
			ended = until
		}
		if late := now.Sub(ended); late > tolerance {
			return fmt.Errorf("%w: election %q: term %d ended %v ago, and its Lead function still runs", ErrLost, e.name, r.l.Term(), late.Round(time.Millisecond))
		}
	}
	return nil
}
