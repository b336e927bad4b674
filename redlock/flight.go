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
//
// undos holds, per lock name, the last undo of a failed acquisition (see Backend.undo) while
// it is in the air, whatever its owner. Every later acquisition of the lock through the
// Backend waits for it node by node, and so does the next undo. A failed attempt's call to a
// node that had not answered yet can still take the lock there after its holder released it,
// and the Client's next call takes a fresh owner ID: without the wait, that call found the
// failed one's hold, a ghost of its own, and with the old holder's key on a node its release
// had not reached yet it was refused a lock that was free.
type flights struct {
	mu    sync.Mutex
	m     map[flightKey]*flight
	undos map[string]*flight
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

// startUndo records an undo flight of n calls for the owner, as start does, and as the lock's
// last undo. It returns the owner's flight before it and the lock's undo before it.
func (fs *flights) startUndo(name, owner string, n int) (f, prev, undo *flight) {
	f, prev = fs.start(name, owner, n)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.undos == nil {
		fs.undos = make(map[string]*flight)
	}
	undo = fs.undos[name]
	fs.undos[name] = f
	return f, prev, undo
}

// land marks the call on node i as returned.
func (fs *flights) land(name, owner string, f *flight, i int) {
	close(f.landed[i])
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.left--; f.left > 0 {
		return
	}
	if fs.m[flightKey{name, owner}] == f {
		delete(fs.m, flightKey{name, owner})
	}
	if fs.undos[name] == f {
		delete(fs.undos, name)
	}
}

// get returns the owner's last flight on the lock, or nil when all its calls have landed.
func (fs *flights) get(name, owner string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[flightKey{name, owner}]
}

// onLock returns the flights of every owner on the lock still in the air.
func (fs *flights) onLock(name string) []*flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []*flight
	for k, f := range fs.m {
		if k.name == name {
			out = append(out, f)
		}
	}
	return out
}

// undoing returns the lock's last undo, or nil when none is in the air.
func (fs *flights) undoing(name string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.undos[name]
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

// turns lets one owner's acquisitions of one lock through a Backend one at a time. Two that
// ran together could each find no lock of the owner's on a majority, each run a token round,
// and each make the lock anew with its own token — the later ending the earlier's hold, a lock
// its holder had just been handed. One after the other, the second finds the first's lock and
// re-enters it.
type turns struct {
	mu sync.Mutex
	m  map[flightKey]*turn
}

type turn struct {
	ch    chan struct{} // holds a value while an acquisition has the turn
	users int           // acquisitions holding or waiting for the turn; guarded by turns.mu
}

// take waits for the owner's turn on the lock, or for ctx to end, and returns what gives the
// turn back.
func (ts *turns) take(ctx context.Context, name, owner string) (func(), error) {
	k := flightKey{name, owner}
	ts.mu.Lock()
	if ts.m == nil {
		ts.m = make(map[flightKey]*turn)
	}
	t := ts.m[k]
	if t == nil {
		t = &turn{ch: make(chan struct{}, 1)}
		ts.m[k] = t
	}
	t.users++
	ts.mu.Unlock()
	leave := func() {
		ts.mu.Lock()
		if t.users--; t.users == 0 {
			delete(ts.m, k)
		}
		ts.mu.Unlock()
	}
	select {
	case t.ch <- struct{}{}:
		return func() { <-t.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
