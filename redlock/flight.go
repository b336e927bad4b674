package redlock

import (
	"context"
	"sync"
)

// A flight is the acquire calls of one acquisition, or the token writes of one round after
// them, which may still be running after Acquire returned: fanOut returns as soon as a
// majority decided. The calls of one owner on one lock keep their order node by node: a
// release waits, on each node, until the owner's last flight there has landed, and an acquire
// (a reentrant one) or a token write waits for the owner's flight before it. Otherwise a
// release could overtake an acquire and leave the key behind until its TTL ends, a reentrant
// acquire could reach a node first and record its own proposed token there instead of the one
// handed out, a token write could reach a node before the lock and not record the token in
// it, and a late token write could take a hold that a reentrant acquire made.
type flight struct {
	landed []chan struct{} // by node: closed when the acquire call there has returned
	left   int             // calls not landed yet; guarded by flights.mu
}

// flights are the flights of a Backend, the last one per lock name and owner; a flight leaves
// the set when its last call lands.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

type flightKey struct{ name, owner string }

// start records a flight of n calls for the owner, and returns it with the owner's flight
// before it on this lock, if one is still in the air: each call of the new flight waits for
// that flight's call on its node.
func (fs *flights) start(name, owner string, n int) (f, prev *flight) {
	f = &flight{landed: make([]chan struct{}, n), left: n}
	for i := range f.landed {
		f.landed[i] = make(chan struct{})
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = make(map[flightKey]*flight)
	}
	prev = fs.m[flightKey{name, owner}]
	fs.m[flightKey{name, owner}] = f
	return f, prev
}

// land marks the call on node i as returned.
func (fs *flights) land(name, owner string, f *flight, i int) {
	close(f.landed[i])
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.left--; f.left == 0 && fs.m[flightKey{name, owner}] == f {
		delete(fs.m, flightKey{name, owner})
	}
}

// get returns the owner's last flight on the lock, or nil when all its calls have landed.
func (fs *flights) get(name, owner string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[flightKey{name, owner}]
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
