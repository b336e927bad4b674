package fencelock

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// EventKind names what happened to a lock.
type EventKind int

// The kinds of Event.
const (
	// EventObtained: a lock was obtained; Duration is the time from the call to the grant,
	// waiting included.
	EventObtained EventKind = iota + 1
	// EventNotObtained: Obtain or TryObtain gave up; Err says why.
	EventNotObtained
	// EventWaited: a waiter woke up, by a release notification or its timer; Duration is how
	// long it slept. A call waiting in a backend's line (Redis, etcd, ZooKeeper) wakes once,
	// when the line grants it the lock: Duration is then its time in line.
	EventWaited
	// EventRenewed: the watchdog or Refresh extended a lock; Duration is the round trip.
	EventRenewed
	// EventRenewFailed: a renewal failed. Its outcome is unknown, and the watchdog tries again
	// until the validity deadline; or, for a Refresh (Context is set), the store refused it
	// too: Err matches ErrNotHeld, and an EventLost follows.
	EventRenewFailed
	// EventLost: a held lock was lost; Err says why, and Holds how many Obtain calls' locks it
	// ended (their handles not yet released).
	EventLost
	// EventReleased: a hold was released; Duration is how long it was held.
	EventReleased
	// EventCleanup: an acquisition that may have reached the store but was not handed out (its
	// reply was lost, or came too late) was undone in the background, or by the call itself
	// when its Client closed meanwhile, or a release not confirmed in time was finished in
	// the background, or a hold the Client had when it closed was released; Err is set when
	// that failed too, and the lock then expires by its TTL.
	EventCleanup
	// EventWaiting: an Obtain (or a semaphore's Acquire) begins to wait, once per call: its
	// first attempt found the lock held, or could not reach the store and will try again (in
	// a backend's line, the backend says when: driver.Request.Waiting). Its EventObtained or
	// EventNotObtained, with Waited set, ends the wait.
	EventWaiting
	// EventUnavailable: an attempt of an Obtain, TryObtain, a semaphore's Acquire or an
	// election's campaign failed because the store could not be reached, or refused for a
	// reason that may pass (Err says which: it matches ErrUnavailable). A waiting call keeps
	// trying; it tells this on its first such attempt and then at most every
	// UnavailableEvery while its attempts keep failing. Attempts is how many failed since it
	// last told it (the first time, 1); Duration is how long its attempts have been failing.
	EventUnavailable
	// EventAvailable: an attempt of a call that told EventUnavailable reached the store again
	// (it was granted the lock, or found it held). Duration is how long its attempts had been
	// failing.
	EventAvailable
	// EventElected: Campaign (or Lead) won a term of the election Name; Token is the term.
	// The term's lock was told as EventObtained before: a leadership counts among the locks
	// held too.
	EventElected
	// EventTermEnded: a term won by Campaign ended — resigned, lost (Err says why), or its
	// Client closed; Duration is how long it lasted. It is told from a goroutine of its own
	// once the term's context ended, and may come after the Client's next EventElected.
	EventTermEnded
)

// UnavailableEvery is how often at most one call tells EventUnavailable while its attempts
// keep failing on the store.
const UnavailableEvery = 5 * time.Second

func (k EventKind) String() string {
	switch k {
	case EventObtained:
		return "obtained"
	case EventNotObtained:
		return "not obtained"
	case EventWaited:
		return "waited"
	case EventRenewed:
		return "renewed"
	case EventRenewFailed:
		return "renew failed"
	case EventLost:
		return "lost"
	case EventReleased:
		return "released"
	case EventCleanup:
		return "cleanup"
	case EventWaiting:
		return "waiting"
	case EventUnavailable:
		return "unavailable"
	case EventAvailable:
		return "available"
	case EventElected:
		return "elected"
	case EventTermEnded:
		return "term ended"
	}
	return "unknown"
}

// Event is what an observer is told.
type Event struct {
	Kind     EventKind
	Name     string
	Token    int64
	Duration time.Duration
	Err      error
	// Owner is the owner ID of the hold the event is about, when there is one: with Token it
	// names the hold.
	Owner string
	// Context is the context of the call the event belongs to — the Obtain or TryObtain
	// (EventObtained, EventNotObtained, EventWaited, EventUnavailable, EventAvailable), the
	// Refresh (its EventRenewed), the Release (EventReleased) — or, for a loss, of the Obtain
	// that made the hold; nil for the watchdog's renewals and the clean-up, which no caller
	// waits for. A span or a log line can be parented to it.
	Context context.Context
	// Took is, for EventReleased, how long the Release call took (Duration is how long the
	// lock was held).
	Took time.Duration
	// Waited is set on the EventObtained or EventNotObtained of a call that had begun to wait
	// (EventWaiting).
	Waited bool
	// Handover is set on an EventObtained whose lock was held by another when the call began
	// and came to it on a release or an expiry: an attempt found it held, or the backend's
	// line granted it after a wait behind another holder.
	Handover bool
	// Holds is, for EventLost, how many locks obtained (one per Obtain, re-entries included)
	// the loss ended: the handles not released before it. Each is released later, with Lost
	// set on its EventReleased; a gauge of locks held counts them out at the loss.
	Holds int
	// Lost is set on the EventReleased of a lock lost before it was released: the loss's
	// EventLost counted it out already.
	Lost bool
	// Attempts is, for EventUnavailable, how many attempts failed on the store since the call
	// last told EventUnavailable: a counter of them adds it.
	Attempts int
}

// Outcome names how an Obtain or TryObtain ended, for a metric's label: "obtained", "held"
// (held elsewhere at the last attempt), "unavailable" (the last attempt could not reach the
// store, got no answer before the context ended, or was refused for a reason that may pass:
// Err matches ErrUnavailable, and the context's error too when the context ended), "timeout"
// (its context ended while the store answered) or "error".
func (e Event) Outcome() string {
	var held *HeldError
	switch {
	case e.Kind == EventObtained:
		return "obtained"
	case errors.Is(e.Err, ErrUnavailable):
		return "unavailable"
	case errors.Is(e.Err, context.DeadlineExceeded), errors.Is(e.Err, context.Canceled):
		return "timeout"
	case errors.As(e.Err, &held), errors.Is(e.Err, ErrNotObtained):
		return "held"
	}
	return "error"
}

// Cause names why a lock was lost (EventLost), for a metric's label: "deadline" (no renewal
// confirmed before the validity deadline), "store" (the store no longer had it), "closed" (the
// Client was closed), "max_hold" (held as long as WithMaxHold allows) or "other".
func (e Event) Cause() string {
	switch {
	case errors.Is(e.Err, ErrClosed):
		return "closed"
	case errors.Is(e.Err, ErrMaxHold):
		return "max_hold"
	case errors.Is(e.Err, errDeadlinePassed):
		return "deadline"
	case errors.Is(e.Err, ErrNotHeld):
		return "store"
	}
	return "other"
}

// Result names how a Release ended (EventReleased), for a metric's label: "ok", "not_held"
// (it had expired or been taken, or was lost) or "error" (unknown outcome: retried in the
// background).
func (e Event) Result() string {
	switch {
	case e.Err == nil:
		return "ok"
	case errors.Is(e.Err, ErrNotHeld), errors.Is(e.Err, ErrLost):
		return "not_held"
	}
	return "error"
}

func slogObserver(h slog.Handler) func(Event) {
	l := slog.New(h)
	return func(e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventLost, EventUnavailable:
			level = slog.LevelWarn
		case EventAvailable:
			level = slog.LevelInfo
		}
		if !h.Enabled(context.Background(), level) {
			return
		}
		attrs := []slog.Attr{slog.String("lock", e.Name), slog.Duration("duration", e.Duration)}
		if e.Token != 0 {
			attrs = append(attrs, slog.Int64("token", e.Token))
		}
		if e.Attempts != 0 {
			attrs = append(attrs, slog.Int("attempts", e.Attempts))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		l.LogAttrs(context.Background(), level, "fencelock: "+e.Kind.String(), attrs...)
	}
}
