package redlock

import (
	"sync"
	"time"
)

// workers runs the node calls of fan-outs on goroutines that live on between calls. A node
// call goes deep into go-redis, and a fresh goroutine grows and copies its stack on the way
// every time: with five nodes and three rounds per acquisition, that copying cost more CPU
// than the calls themselves. An idle worker exits after workerIdle; close stops them all.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only when a worker is waiting
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex // guards closed against wg.Add
	closed bool
}

const workerIdle = 10 * time.Second

func newWorkers() *workers {
	return &workers{tasks: make(chan func()), stop: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one, and reports whether it did: once the workers
// are closed it starts no goroutine, and the caller answers for f.
func (w *workers) run(f func()) bool {
	select { // a worker that takes f before close has stopped it is one close waits for
	case w.tasks <- f:
		return true
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Add(1)
	go w.loop(f)
	return true
}

func (w *workers) loop(f func()) {
	defer w.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}

// close stops the idle workers and waits for all of them; calls in flight finish first.
func (w *workers) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	w.wg.Wait()
}
