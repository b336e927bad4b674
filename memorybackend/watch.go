package memorybackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// watch is a WatchRelease: woken each time the lock of its name may have become free.
type watch struct{ ch chan struct{} }

func (w *watch) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// WatchRelease implements driver.ReleaseWatcher: the channel receives a value each time the
// lock name is released, expires or is forgotten.
func (b *Backend) WatchRelease(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if name == "" {
		return nil, nil, errNoName
	}
	w := &watch{ch: make(chan struct{}, 1)}
	err := b.call(ctx, "watch-release", name, func() error {
		b.s.mu.Lock()
		e := b.s.get(name)
		if e.released == nil {
			e.released = make(map[*watch]struct{})
		}
		e.released[w] = struct{}{}
		b.s.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	stop := sync.OnceFunc(func() {
		var fx effects
		b.s.mu.Lock()
		if e := b.s.names[name]; e != nil {
			delete(e.released, w)
			b.s.finish(e, time.Now(), &fx)
		}
		b.s.mu.Unlock()
		fx.run()
	})
	return w.ch, stop, nil
}

// lossWatch is a WatchLoss: lost is called once, when the Store drops the hold it watches
// other than by its holder's release.
type lossWatch struct {
	once sync.Once
	fn   func(error)
}

func (w *lossWatch) lost(why error) { w.once.Do(func() { w.fn(why) }) }

// WatchLoss implements driver.LossWatcher: when the lock (or permit) of lease ends other
// than by its holder's release — its TTL ran out, Expire, Forget, ForceRelease — lost is
// called at once, from a goroutine of its own. It makes no call, so no fault of the Backend
// touches it: a Store's push reaches its Backends, as Redis's reach a client that tracks.
func (b *Backend) WatchLoss(lease driver.Lease, lost func(reason error)) (stop func()) {
	w := &lossWatch{fn: lost}
	who := lease.Owner
	if lease.Limit > 0 {
		who = permitKey(lease.Owner)
	}
	s := b.s
	s.mu.Lock()
	e := s.get(lease.Name)
	now := time.Now()
	var fx effects
	s.settle(e, now, &fx)
	h := e.lock
	if lease.Limit > 0 {
		h = permitOf(e, lease.Owner)
	}
	if h == nil || h.owner != lease.Owner || (lease.Token != 0 && h.token != lease.Token) {
		fx.lost = append(fx.lost, func() { w.lost(errGone) })
	} else {
		if e.losses == nil {
			e.losses = make(map[*lossWatch]string)
		}
		e.losses[w] = who
	}
	s.mu.Unlock()
	fx.run()
	return func() {
		s.mu.Lock()
		if e := s.names[lease.Name]; e != nil {
			delete(e.losses, w)
		}
		s.mu.Unlock()
	}
}

var errGone = fmt.Errorf("%w: memorybackend: the lock is not this holder's", driver.ErrNotHeld)

// WatchHolder implements driver.HolderWatcher on the watches of WatchRelease: the channel
// receives a value each time the lock name is released (and maybe handed to the next in line),
// expires, is forgotten, or its holder publishes a new value (Publish). The acquisition of a
// free lock is not told.
func (b *Backend) WatchHolder(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.WatchRelease(ctx, name)
}

// PushesAcquisitions implements driver.HolderWatcher: the acquisition of a free lock is not
// told.
func (b *Backend) PushesAcquisitions() bool { return false }
