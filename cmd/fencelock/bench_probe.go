package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// waitProbe wraps the waiter's backend in the handoff phase and tells when the waiter is
// blocked in Obtain, so that the holder releases only then and the handoff measures a wake-up,
// not a race between two attempts. It keeps the capabilities of the backend it wraps: release
// notification, or a waiting queue.
type waitProbe struct {
	fencelock.Backend
	watcher  driver.ReleaseWatcher // nil when the backend cannot notify releases
	watching atomic.Bool           // the waiter has subscribed since arm
	armed    atomic.Pointer[chan struct{}]
}

// newWaitProbe returns the probe and the backend to give the waiter's Client. settle is how
// long a queued waiter is given to take its place in the queue, which the probe cannot see.
func newWaitProbe(b fencelock.Backend, settle time.Duration) (*waitProbe, fencelock.Backend) {
	p := &waitProbe{Backend: b}
	if q, ok := b.(driver.Queue); ok {
		return p, queueProbe{p, q, settle}
	}
	if w, ok := b.(driver.ReleaseWatcher); ok {
		p.watcher = w
		return p, watchingProbe{p}
	}
	return p, p
}

// arm returns a channel closed once the waiter is blocked.
func (p *waitProbe) arm() <-chan struct{} {
	ch := make(chan struct{})
	p.watching.Store(false)
	p.armed.Store(&ch)
	return ch
}

func (p *waitProbe) fire() {
	if ch := p.armed.Swap(nil); ch != nil {
		close(*ch)
	}
}

// Acquire fires when the waiter finds the lock held after it subscribed to releases: Obtain
// sleeps next. Without release notification the first refusal is the moment.
func (p *waitProbe) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := p.Backend.Acquire(ctx, req)
	var held *fencelock.HeldError
	if errors.As(err, &held) && (p.watcher == nil || p.watching.Load()) {
		p.fire()
	}
	return g, err
}

type watchingProbe struct{ *waitProbe }

func (p watchingProbe) WatchRelease(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	ch, stop, err := p.watcher.WatchRelease(ctx, name)
	if err != nil {
		p.fire() // Obtain falls back on the holder's TTL and sleeps at once
	} else {
		p.watching.Store(true)
	}
	return ch, stop, err
}

type queueProbe struct {
	*waitProbe
	q      driver.Queue
	settle time.Duration
}

func (p queueProbe) AcquireQueued(ctx context.Context, req driver.Request) (driver.Grant, error) {
	t := time.AfterFunc(p.settle, p.fire)
	defer t.Stop()
	return p.q.AcquireQueued(ctx, req)
}
