package fencelock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// watchdog renews every hold of a Client that has the watchdog on: one goroutine that wakes
// when the next hold falls due and sends the holds due together as one Backend.Renew batch.
// It only renews; a hold's own timer ends it when its deadline passes, so a watchdog that is
// late, stuck or wrong about when to wake can lose a lock but never keep one trusted too long.
//
// Locking: mu guards holds, running, closed, the plan (wakeAt, every, added, scans) and the
// watch fields. It is taken before a hold's mu, never while one is held.
type watchdog struct {
	c       *Client
	mu      sync.Mutex
	holds   map[*hold]struct{}
	running bool
	closed  bool
	wakeAt  time.Time     // when the loop wakes next; set in the same critical section as the scan
	every   time.Duration // the renewal interval of the hold added last (see tick)
	added   bool          // a hold was added since the last scan
	scans   int           // how many scans the loop made, for the tests
	wake    chan struct{}
	stop    chan struct{}
	base    context.Context // ends on close, aborting renewals in flight
	abort   context.CancelFunc
	wg      sync.WaitGroup // the loop and its renewal batches

	// The holds whose loss watch is yet to start, in about the order of their watchAt, which
	// is a fixed time after each grant: a timer of their own starts them, so that no hold adds
	// a wake-up or a scan to the renewal loop.
	pending    []*hold
	watchT     *time.Timer // fires at the first pending hold's watchAt
	watchArmed bool
}

func newWatchdog(c *Client) *watchdog {
	base, abort := context.WithCancel(context.Background())
	return &watchdog{
		c:     c,
		holds: make(map[*hold]struct{}),
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		base:  base,
		abort: abort,
	}
}

// add starts renewing h, waking the loop when h falls due before the loop planned to wake.
func (w *watchdog) add(h *hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	due, watchAt, every, ok := h.due()
	if w.closed || !ok {
		return
	}
	w.holds[h] = struct{}{}
	w.every, w.added = every, true
	if !watchAt.IsZero() {
		w.pending = append(w.pending, h)
		if !w.watchArmed {
			w.armWatch(watchAt)
		}
	}
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.loop()
		return
	}
	w.soon(due)
}

// armWatch sets the watch timer to fire at t; w.mu is held.
func (w *watchdog) armWatch(t time.Time) {
	d := t.Sub(w.c.now())
	if w.watchT == nil {
		w.watchT = time.AfterFunc(d, w.startWatches)
	} else {
		w.watchT.Reset(d)
	}
	w.watchArmed = true
}

// startWatches is the watch timer: it asks the backend to watch every pending hold that has
// come due and is still live, and sets the timer for the next.
func (w *watchdog) startWatches() {
	now := w.c.now()
	var due []*hold
	w.mu.Lock()
	w.watchArmed = false
	if w.closed {
		w.pending = nil
		w.mu.Unlock()
		return
	}
	i := 0
	for ; i < len(w.pending); i++ {
		h := w.pending[i]
		_, at, _, ok := h.due()
		if ok && at.After(now) {
			w.armWatch(at)
			break
		}
		if ok {
			due = append(due, h)
		}
	}
	clear(w.pending[:i])
	w.pending = w.pending[i:]
	w.mu.Unlock()
	for _, h := range due {
		h.watchLoss()
	}
}

// soon makes the loop wake by t; w.mu is held. A wake-up per Obtain would cost more than the
// Obtain itself, so only a hold due before the planned wake-up pokes the loop.
func (w *watchdog) soon(t time.Time) {
	if t.Before(w.wakeAt) {
		w.wakeAt = t
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// rescheduled tells the watchdog that h's next renewal moved to t (a Refresh).
func (w *watchdog) rescheduled(h *hold, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.holds[h]; ok {
		w.soon(t)
	}
}

func (w *watchdog) remove(h *hold) {
	w.mu.Lock()
	delete(w.holds, h)
	w.mu.Unlock()
}

// close stops the loop and waits for it and its renewals to finish.
func (w *watchdog) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.stop)
	w.abort()
	if w.watchT != nil {
		w.watchT.Stop()
	}
	w.pending = nil
	w.mu.Unlock()
	w.wg.Wait()
}

func (w *watchdog) loop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(w.tick())
		select {
		case <-timer.C:
		case <-w.wake:
		case <-w.stop:
			return
		}
	}
}

// tick starts one renewal batch of the holds due, and returns how long to sleep until the next
// one falls due. It plans its wake-up in the same critical section as its scan, so a hold added
// after the scan sees the plan and pokes the loop if it needs it sooner.
func (w *watchdog) tick() time.Duration {
	now := w.c.now()
	sleep := time.Hour
	var due []*hold
	anyDue := false
	w.mu.Lock()
	for h := range w.holds {
		renewAt, every, busy := h.pace()
		if busy {
			continue // the batch pokes the loop when it is done
		}
		// A hold falls due at its renewal time. When one does, every hold due within half an
		// interval goes in the same batch: renewed together they stay together, so a client's
		// renewals settle into a few batches per interval however many locks it holds, each
		// renewed about once per interval.
		left := renewAt.Sub(now)
		if left <= every/2 {
			due = append(due, h)
		}
		if left <= 0 {
			anyDue = true
		} else {
			sleep = min(sleep, left)
		}
	}
	var batch []*hold
	var done chan struct{}
	if anyDue {
		done = make(chan struct{})
		for _, h := range due {
			if h.claim(done) {
				batch = append(batch, h)
			}
		}
	}
	// With no hold to renew, a scan that follows an add plans a wake-up half an interval of
	// that hold away rather than an hour: a Client that takes one short lock after another
	// often scans between two of them, and the next, due one interval after its grant, would
	// poke the loop again (a wake-up in 15% to 37% of the cycles of TryObtain and Release on
	// fresh names). So such a Client's loop wakes twice an interval, and an idle one sleeps.
	if len(w.holds) == 0 && w.added {
		sleep = w.every / 2
	}
	w.added = false
	w.scans++
	sleep = max(sleep, time.Millisecond)
	w.wakeAt = now.Add(sleep)
	w.mu.Unlock()
	if len(batch) > 0 {
		w.wg.Add(1)
		go w.renew(batch, done)
	}
	return sleep
}

// renew sends one batch, in a goroutine of its own so that a slow store does not hold back
// the next batch, and records each outcome in its hold.
func (w *watchdog) renew(batch []*hold, done chan struct{}) {
	defer w.wg.Done()
	defer close(done)
	now := w.c.now()
	leases := make([]driver.Lease, len(batch))
	timeout := time.Duration(0)
	for i, h := range batch {
		leases[i] = h.lease()
		timeout = max(timeout, h.validUntil().Sub(now))
	}
	// A renewal confirmed after every deadline of the batch is of no use.
	ctx, cancel := context.WithTimeout(w.base, max(timeout, time.Millisecond))
	sent := w.c.now()
	res := w.c.b.Renew(ctx, leases)
	cancel()
	took := w.c.now().Sub(sent)
	for i, h := range batch {
		r := driver.Renewal{Err: errors.New("fencelock: backend returned too few renewal results")}
		if i < len(res) {
			r = res[i]
		}
		switch {
		case r.Err == nil:
			if _, ok := h.renewed(sent, leases[i].TTL-h.delay, r.Validity, false); ok {
				w.c.emit(Event{Kind: EventRenewed, Name: h.name, Token: h.token, Duration: took, Owner: h.owner})
			}
		case errors.Is(r.Err, ErrNotHeld):
			h.lose(r.Err)
		default:
			h.retrySoon()
			if h.err() == nil {
				w.c.emit(Event{Kind: EventRenewFailed, Name: h.name, Token: h.token, Duration: took, Err: r.Err, Owner: h.owner})
			}
		}
		h.unclaim(done)
	}
	w.mu.Lock()
	w.soon(time.Time{}) // plan again now that these holds can be renewed
	w.mu.Unlock()
}
