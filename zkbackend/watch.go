package zkbackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

var _ driver.HolderWatcher = (*Backend)(nil)

// WatchHolder implements driver.HolderWatcher with ZooKeeper's watches: one on the lock's
// directory (a node joins or leaves the line: an acquisition, a release, a hand-over, a
// session's end), one on the data of the node first in line (Publish), or, while the
// directory does not exist, one on its creation. Each watch fires once; a goroutine sets them
// again after each change, and the channel receives a value for each. It ends with stop, ctx
// or the Backend's Close; stop waits for it.
func (b *Backend) WatchHolder(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.usable(ctx, name); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stopBackend := context.AfterFunc(b.ctx, cancel)
	changed := make(chan struct{}, 1)
	ready := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { b.watchHolder(wctx, b.Path(name), ready, changed) })
	stop := sync.OnceFunc(func() {
		cancel()
		stopBackend()
		wg.Wait()
	})
	if err := <-ready; err != nil {
		stop()
		return nil, nil, err
	}
	return changed, stop, nil
}

// watchHolder sets the watches of dir until ctx ends, sending on changed each time it has set them again after one fired (or after a failure);
// it tells ready how its first setting went, and ends if that failed.
func (b *Backend) watchHolder(ctx context.Context, dir string, ready chan<- error, changed chan<- struct{}) {
	wake := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	for again := 0; ; again++ {
		watches, err := b.setHolderWatches(ctx, dir)
		switch {
		case ready != nil:
			ready <- err
			ready = nil
			if err != nil {
				return
			}
		case err != nil:
			if !pause.For(ctx, min(50*time.Millisecond<<min(again, 6), 2*time.Second)) {
				return
			}
			continue
		default:
			// Told once the watches are set again, never before: a change after the reader's
			// look then fires them.
			wake()
		}
		again = 0
		select {
		case <-watches[0]:
		case <-watches[1]:
		case <-ctx.Done():
			return
		}
	}
}

// setHolderWatches sets a watch on dir's children and on the data of its first node in line,
// or one on dir's creation while it does not exist.
func (b *Backend) setHolderWatches(ctx context.Context, dir string) ([2]<-chan zk.Event, error) {
	var w [2]<-chan zk.Event
	for range lookTries {
		children, cw, err := b.childrenW(ctx, dir)
		if err == zk.ErrNoNode {
			ok, ew, err := b.existsW(ctx, dir)
			if err != nil {
				return w, classify(err)
			}
			if ok {
				continue // created meanwhile
			}
			w[0] = ew
			return w, nil
		}
		if err != nil {
			return w, classify(err)
		}
		w[0] = cw
		if q := lineUp(children, false); len(q) > 0 {
			_, _, dw, err := b.getW(ctx, dir+"/"+q[0].name)
			if err == zk.ErrNoNode {
				continue // gone meanwhile: the children's watch fires too
			}
			if err != nil {
				return w, classify(err)
			}
			w[1] = dw
		}
		return w, nil
	}
	return w, fmt.Errorf("%w: %q changed hands %d times while its watches were set", driver.ErrUnavailable, dir, lookTries)
}

// PushesAcquisitions implements driver.HolderWatcher: a lock node's creation and removal,
// by its holder or with its session, fire the directory's watch.
func (b *Backend) PushesAcquisitions() bool { return true }
