package redisbackend

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/releasewatch"
)

// A lineWait is one AcquireQueued call's wait in a line kept in Redis, a lock's or a
// semaphore's: its place, renewed by its attempts, and what it has seen and heard. The waiter
// listens on a channel of its Backend alone, where a release announces the hand-overs it makes
// to this Backend's waiters inside its script; a lineKind says what differs between a lock and
// a permit: the script an attempt runs, and how a grant is finished.
type lineWait struct {
	req     driver.Request
	life    time.Duration // how long its place lives unless renewed
	hand    time.Duration // how long a release hands it what it waits for
	start   time.Time
	seen    attemptSeen
	granted chan int64 // hand-overs announced to it: their tokens
	w       *releasewatch.Waiter
	channel string // where its Backend's hand-overs are announced
	watch   *releasewatch.Set
}

// A lineKind is a lock's or a permit's part of a wait in line.
type lineKind interface {
	// attempt runs the script once: a grant, or nil while the caller waits in line, with what
	// the attempt saw in seen (seen.pttl: how long the holder has left, in ms, or -1 when a
	// waiter ahead is next); or an error. It returns when the attempt was sent.
	attempt(ctx context.Context, seen *attemptSeen) (*driver.Grant, time.Time, error)
	// finish ends the wait with the attempt sent at sent that granted g or failed with err;
	// a failure that may have left the caller in line takes it out.
	finish(ctx context.Context, g *driver.Grant, sent time.Time, err error) (driver.Grant, error)
	// handedOver ends the wait with a hand-over g, counted from sent: the latest attempt that
	// found the caller in line.
	handedOver(ctx context.Context, g driver.Grant, sent time.Time) (driver.Grant, error)
	// leave takes the caller out of line, in the background.
	leave()
}

// newLineWait returns a wait of req in line that listens on channel. Its place lives
// min(TTL, maxEntryLife) unless renewed, and a release hands it the lock, or the permit, for
// that long too: a waiter that died since it last renewed its place keeps it from the others
// that long at most, not for its whole TTL. A live one's Client extends it to its TTL
// (driver.Grant.Validity). The caller sets w.Message, which passes hand-overs on with handed.
func (b *Backend) newLineWait(req driver.Request, channel string) *lineWait {
	life := min(req.TTL, maxEntryLife)
	l := &lineWait{req: req, life: life, hand: life, start: time.Now(), granted: make(chan int64, 1), w: releasewatch.NewWaiter(), channel: channel, watch: b.watch}
	l.seen = attemptSeen{sent: l.start}
	return l
}

// handed passes on a hand-over announced to this waiter, with its token in decimal.
func (l *lineWait) handed(token string) {
	if t, err := strconv.ParseInt(token, 10, 64); err == nil {
		select {
		case l.granted <- t:
		default:
		}
	}
}

// wait makes the first attempt and, while the caller is in line, waits: a client that waited
// here a moment ago is still subscribed, and the waiter listens before its first attempt;
// otherwise the first attempt goes before subscribing, so that a free lock costs one round trip
// and no subscription.
func (l *lineWait) wait(ctx context.Context, k lineKind) (driver.Grant, error) {
	joined := l.watch.Join(l.channel, l.w)
	if joined {
		defer l.watch.Remove(l.channel, l.w)
	}
	g, sent, err := k.attempt(ctx, &l.seen)
	if err != nil || g != nil {
		return k.finish(ctx, g, sent, err)
	}
	l.req.StartWait()
	var subscribed <-chan struct{}
	next := waitFor(l.life, l.seen.pttl)
	if !joined {
		subscribed, err = l.watch.Add(ctx, l.channel, l.w)
		defer l.watch.Remove(l.channel, l.w)
		if err != nil {
			k.leave() // a grant after this return would hold it for no one
			return driver.Grant{}, fmt.Errorf("%w: subscribe %s: %w", driver.ErrUnavailable, l.channel, err)
		}
		next = min(releasewatch.AckTimeout, next)
	}
	return l.listen(ctx, k, subscribed, next)
}

// listen waits in line, attempting again when a release may have freed what it waits for,
// when its place needs renewing, or when subscribed fires (no hand-over can pass unseen from
// then on), the first time after next.
func (l *lineWait) listen(ctx context.Context, k lineKind, subscribed <-chan struct{}, next time.Duration) (driver.Grant, error) {
	timer := time.NewTimer(next)
	defer timer.Stop()
	for {
		select {
		case t := <-l.granted:
			if g := l.seen.handover(t, l.hand); g != nil {
				return k.handedOver(ctx, *g, l.seen.sent)
			}
			continue
		case <-subscribed:
			subscribed = nil
		case <-l.w.Wake:
		case <-timer.C:
		case <-ctx.Done():
			k.leave()
			return driver.Grant{}, ctx.Err()
		}
		select { // a hand-over heard with the wake needs no attempt
		case t := <-l.granted:
			if g := l.seen.handover(t, l.hand); g != nil {
				return k.handedOver(ctx, *g, l.seen.sent)
			}
		default:
		}
		g, sent, err := k.attempt(ctx, &l.seen)
		if err != nil || g != nil {
			return k.finish(ctx, g, sent, err)
		}
		timer.Reset(waitFor(l.life, l.seen.pttl))
	}
}
