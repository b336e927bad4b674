package fencelock

import (
	"fmt"
	"sync"
	"time"
)

// holdState is what a Client knows of one lock it holds for one owner. Reentrant acquisitions
// by the same owner share it: one renewal, one validity deadline, one loss for all handles.
type holdState struct {
	c           *Client
	name, owner string
	watchdog    bool
	onLost      func(string, error)
	token       int64
	obtained    time.Time
	every       time.Duration // renewal interval
	renewQueued bool          // guarded by c.sched.mu: a renewal is in flight
	renewDone   chan struct{} // guarded by mu: closed when the in-flight renewal ends
	mu          sync.Mutex    // guards the fields below
	ttl         time.Duration
	deadline    time.Time // validity deadline on the Client's clock
	renewAt     time.Time // when the watchdog renews next
	refs        int       // handles not yet released
	handles     []*lockContext
	handle0     [1]*lockContext // backs handles while there is one, as there usually is
	err         error           // set once: lostError or releasedError; the state is over
}

// join adds a reentrant hold; it fails when the state is over.
func (st *holdState) join(deadline time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return false
	}
	st.refs++
	if deadline.After(st.deadline) {
		st.deadline = deadline
	}
	return true
}

func (st *holdState) attach(ctx *lockContext) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return false
	}
	st.handles = append(st.handles, ctx)
	return true
}

func (st *holdState) errOrLost() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	return &lostError{}
}

// valid reports whether the lock is still trusted, ending it when its deadline has passed. It
// reads the clock, so a holder that resumes from a pause sees the loss before any timer fires.
func (st *holdState) valid() error {
	now := st.c.now()
	st.mu.Lock()
	err, deadline := st.err, st.deadline
	st.mu.Unlock()
	if err != nil {
		return err
	}
	if now.Before(deadline) {
		return nil
	}
	st.end(&lostError{reason: fmt.Errorf("validity deadline passed %v ago without a confirmed renewal", now.Sub(deadline))}, true)
	return st.errOrLost()
}

// extend records a confirmed renewal sent at sent, vouched for validity (the TTL when zero).
func (st *holdState) extend(sent time.Time, ttl, validity time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return
	}
	v := ttl
	if validity > 0 && validity < v {
		v = validity
	}
	if d := sent.Add(v - drift(ttl)); d.After(st.deadline) {
		st.deadline = d
	}
	st.renewAt = sent.Add(min(st.every, v/3))
}

// end finishes the state with err, cancels every handle's context and stops its renewal. The
// first call wins.
func (st *holdState) end(err error, lost bool) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	st.err = err
	handles := st.handles
	st.handles = nil
	st.mu.Unlock()
	st.c.forget(st)
	st.c.sched.remove(st)
	for _, h := range handles {
		h.cancel(err)
	}
	if lost {
		st.c.emit(Event{Kind: EventLost, Name: st.name, Token: st.token, Duration: st.c.now().Sub(st.obtained), Err: err})
		if st.onLost != nil {
			st.onLost(st.name, err)
		}
	}
}

// drop releases one handle. When it was the last, the state ends and drop waits until a
// renewal in flight has finished, so that no renewal runs after the lock is released.
func (st *holdState) drop(ctx *lockContext) (last bool) {
	st.mu.Lock()
	for i, h := range st.handles {
		if h == ctx {
			st.handles = append(st.handles[:i], st.handles[i+1:]...)
			break
		}
	}
	st.refs--
	last = st.refs <= 0
	st.mu.Unlock()
	if !last {
		return false
	}
	st.end(releasedError{}, false)
	st.mu.Lock()
	done := st.renewDone
	st.mu.Unlock()
	if done != nil {
		<-done
	}
	return true
}
