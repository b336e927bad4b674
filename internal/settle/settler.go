package settle

import (
	"slices"
	"time"
)

// run is the settler: it pays what is owed, one item at a time, until nothing is or the
// Ledger closes.
func (l *Ledger[T]) run() {
	failures := 0
	for {
		e, it, wait, ok := l.next()
		switch {
		case !ok:
			return
		case e == nil:
			l.pause(wait)
			continue
		}
		done, pending := l.cfg.Pay(l.ctx, &it)
		l.finish(e, it, done, pending)
		if done {
			failures = 0
			continue
		}
		l.pause(l.cfg.Backoff[min(failures, len(l.cfg.Backoff)-1)])
		failures++
	}
}

// next takes the first item the settler can pay now, marks it as being paid and returns it
// with a copy of its item, for the payment to change. When none can be paid now, it returns
// how long to wait (0: until woken): the store is out of reach, or each item waits for its
// write, whose landing wakes the settler. ok is false when the settler ends: nothing is owed
// any more, or the Ledger closed.
func (l *Ledger[T]) next() (e *entry[T], it T, wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.wake: // what it asked for is looked at now
	default:
	}
	if l.cfg.Gone != nil {
		l.owed = slices.DeleteFunc(l.owed, func(e *entry[T]) bool { return l.cfg.Gone(e.it) })
		l.emptied()
	}
	if len(l.owed) == 0 || l.closed {
		l.settling = false
		l.ended()
		return nil, it, 0, false
	}
	if l.cfg.Blocked != nil {
		if wait = l.cfg.Blocked(); wait > 0 {
			return nil, it, wait, true
		}
	}
	for i, e := range l.owed {
		if !e.waiting() {
			l.owed = slices.Delete(l.owed, i, i+1)
			l.paying, l.paid = e, make(chan struct{})
			return e, e.it, 0, true
		}
	}
	return nil, it, 0, true
}

// finish ends the payment of e, which left its item as it: owed again, at the back, unless
// done.
func (l *Ledger[T]) finish(e *entry[T], it T, done bool, pending <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !done {
		e.it = it
		if pending != nil {
			l.await(e, pending)
		}
		l.owed = append(l.owed, e)
	}
	l.paying = nil
	close(l.paid)
	l.emptied()
}

// pause waits d, or until woken when d is 0, or until Close.
func (l *Ledger[T]) pause(d time.Duration) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
	case <-l.wake:
	case <-l.ctx.Done():
	}
}
