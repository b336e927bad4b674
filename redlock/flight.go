package redlock

import (
	"context"
	"sync"
)

// A flight is the acquire calls of one hold, which may still be running after Acquire
// returned: fanOut returns as soon as a majority decided. A release of the hold on a node waits
// until that node's acquire call has returned, so that it cannot overtake it and leave the
// key behind on the node until its TTL ends.
type flight struct {
	landed []chan struct{} // by node: closed when the acquire call there has returned
	left   int             // calls not landed yet; guarded by flights.mu
}

// flights are the flights of a Backend, by lock name and hold ID; a flight leaves the set when
// its last call lands.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

type flightKey struct{ name, hold string }

// start records a flight of n calls for the hold.
func (fs *flights) start(name, hold string, n int) *flight {
	f := &flight{landed: make([]chan struct{}, n), left: n}
	for i := range f.landed {
		f.landed[i] = make(chan struct{})
	}
	fs.mu.Lock()
	if fs.m == nil {
		fs.m = make(map[flightKey]*flight)
	}
	fs.m[flightKey{name, hold}] = f
	fs.mu.Unlock()
	return f
}

// land marks the call on node i as returned.
func (fs *flights) land(name, hold string, f *flight, i int) {
	close(f.landed[i])
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.left--; f.left == 0 && fs.m[flightKey{name, hold}] == f {
		delete(fs.m, flightKey{name, hold})
	}
}

// forget removes a flight whose calls were never made.
func (fs *flights) forget(name, hold string, f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m[flightKey{name, hold}] == f {
		delete(fs.m, flightKey{name, hold})
	}
}

// get returns the hold's flight, or nil when all its calls have landed.
func (fs *flights) get(name, hold string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[flightKey{name, hold}]
}

// wait returns once the acquire call on node i has landed (at once for a nil flight), or with
// ctx's error when ctx ends first.
func (f *flight) wait(ctx context.Context, i int) error {
	if f == nil {
		return nil
	}
	select {
	case <-f.landed[i]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
