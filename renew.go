package fencelock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// scheduler is a Client's watchdog: one goroutine that renews every held lock when it falls
// due, batching the locks due together into one Backend.Renew call, and ends a lock whose
// validity deadline passes without a confirmed renewal.
type scheduler struct {
	c       *Client
	mu      sync.Mutex // guards entries, running and closed
	entries map[*holdState]struct{}
	running bool
	closed  bool
	wakeAt  time.Time // when the loop plans to wake next
	wake    chan struct{}
	stop    chan struct{}
	base    context.Context // ends on close, aborting renewals in flight
	abort   context.CancelFunc
	wg      sync.WaitGroup // the loop and its renewal batches
}

func newScheduler(c *Client) *scheduler {
	base, abort := context.WithCancel(context.Background())
	return &scheduler{
		c:       c,
		entries: make(map[*holdState]struct{}),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		base:    base,
		abort:   abort,
	}
}

func (s *scheduler) add(st *holdState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.entries[st] = struct{}{}
	if !s.running {
		s.running = true
		s.wg.Add(1)
		go s.loop()
		return
	}
	// Wake the loop only when the new lock needs it sooner than planned: a goroutine wake-up
	// per Obtain would cost more than the Obtain itself.
	st.mu.Lock()
	first := st.renewAt
	if !st.watchdog || st.deadline.Before(first) {
		first = st.deadline
	}
	st.mu.Unlock()
	if first.Before(s.wakeAt) {
		s.wakeAt = first
		s.poke()
	}
}

func (s *scheduler) remove(st *holdState) {
	s.mu.Lock()
	delete(s.entries, st)
	s.mu.Unlock()
}

// poke wakes the loop without blocking.
func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close stops the loop and waits for it and its renewals to finish.
func (s *scheduler) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	s.abort()
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *scheduler) loop() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.tick()
		s.mu.Lock()
		s.wakeAt = s.c.now().Add(next)
		s.mu.Unlock()
		timer.Reset(next)
		select {
		case <-timer.C:
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}

// tick ends expired locks, starts one renewal batch of the locks due, and returns how long to
// sleep until something is due again.
func (s *scheduler) tick() time.Duration {
	now := s.c.now()
	sleep := time.Hour
	var expired, due []*holdState
	anyDue := false
	s.mu.Lock()
	for st := range s.entries {
		st.mu.Lock()
		deadline, renewAt, every := st.deadline, st.renewAt, st.every
		st.mu.Unlock()
		if !now.Before(deadline) {
			expired = append(expired, st)
			continue
		}
		sleep = min(sleep, deadline.Sub(now))
		if !st.watchdog || st.renewQueued {
			continue
		}
		// A lock falls due at its renewal time. When one does, every lock due within half an
		// interval goes in the same batch: renewed together they stay together, so a client's
		// renewals settle into a few batches per interval however many locks it holds, each
		// lock renewed about once per interval.
		left := renewAt.Sub(now)
		if left <= every/2 {
			due = append(due, st)
		}
		if left <= 0 {
			anyDue = true
		} else {
			sleep = min(sleep, left)
		}
	}
	if anyDue {
		for _, st := range due {
			st.renewQueued = true
		}
	} else {
		due = nil
	}
	s.mu.Unlock()
	for _, st := range expired {
		_ = st.valid() // ends it, with the reason
	}
	if len(due) > 0 {
		s.renew(due)
	}
	return max(sleep, time.Millisecond)
}

// renew sends one batch in its own goroutine, so a slow store does not hold back the deadline
// checks of other locks.
func (s *scheduler) renew(due []*holdState) {
	done := make(chan struct{})
	leases := make([]Lease, 0, len(due))
	batch := due[:0]
	timeout := time.Duration(0)
	now := s.c.now()
	for _, st := range due {
		st.mu.Lock()
		if st.err != nil {
			st.mu.Unlock()
			s.unqueue(st)
			continue
		}
		st.renewDone = done
		timeout = max(timeout, st.deadline.Sub(now))
		leases = append(leases, Lease{Name: st.name, Owner: st.owner, TTL: st.ttl})
		st.mu.Unlock()
		batch = append(batch, st)
	}
	if len(batch) == 0 {
		close(done)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(s.base, max(timeout, time.Millisecond))
		sent := s.c.now()
		res := s.c.b.Renew(ctx, leases)
		cancel()
		took := s.c.now().Sub(sent)
		for i, st := range batch {
			var r Renewal
			if i < len(res) {
				r = res[i]
			} else {
				r.Err = errors.New("fencelock: backend returned too few renewal results")
			}
			switch err := r.Err; {
			case err == nil:
				st.extend(sent, leases[i].TTL, r.Validity)
				s.c.emit(Event{Kind: EventRenewed, Name: st.name, Token: st.token, Duration: took})
			case errors.Is(err, ErrNotHeld):
				st.end(&lostError{reason: err}, true)
			default:
				// Unknown outcome: try again soon, while the deadline leaves time.
				st.mu.Lock()
				st.renewAt = s.c.now().Add(min(st.every/4, st.deadline.Sub(s.c.now())/2))
				st.mu.Unlock()
				s.c.emit(Event{Kind: EventRenewFailed, Name: st.name, Token: st.token, Duration: took, Err: err})
			}
			st.mu.Lock()
			if st.renewDone == done {
				st.renewDone = nil
			}
			st.mu.Unlock()
			s.unqueue(st)
		}
		s.poke()
	}()
}

func (s *scheduler) unqueue(st *holdState) {
	s.mu.Lock()
	st.renewQueued = false
	s.mu.Unlock()
}
