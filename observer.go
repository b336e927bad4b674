package fencelock

import (
	"context"
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
	// long it slept.
	EventWaited
	// EventRenewed: the watchdog or Refresh extended a lock; Duration is the round trip.
	EventRenewed
	// EventRenewFailed: a renewal's outcome is unknown; the watchdog tries again until the
	// validity deadline.
	EventRenewFailed
	// EventLost: a held lock was lost; Err says why.
	EventLost
	// EventReleased: a hold was released; Duration is how long it was held.
	EventReleased
	// EventCleanup: an acquisition that may have reached the store but was not handed out (its
	// reply was lost, or came too late) was undone in the background; Err is set when the undo
	// failed too, and the lock then expires by its TTL.
	EventCleanup
)

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
}

func slogObserver(h slog.Handler) func(Event) {
	l := slog.New(h)
	return func(e Event) {
		level := slog.LevelDebug
		if e.Kind == EventLost {
			level = slog.LevelWarn
		}
		if !h.Enabled(context.Background(), level) {
			return
		}
		attrs := []slog.Attr{slog.String("lock", e.Name), slog.Duration("duration", e.Duration)}
		if e.Token != 0 {
			attrs = append(attrs, slog.Int64("token", e.Token))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		l.LogAttrs(context.Background(), level, "fencelock: "+e.Kind.String(), attrs...)
	}
}
