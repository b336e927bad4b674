package fence

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Memory is an in-process fencing guard. It keeps, per resource, the
// newest token it has accepted and refuses any older one.
//
// The zero value is ready to use. A Memory is safe for concurrent use and
// must not be copied after first use. Do holds its resource for the whole
// of the write it runs: writes to one resource are ordered by token, and
// writes to different resources run in parallel.
//
// Resources are never forgotten: forgetting one would forget its newest
// token and let a stale holder back in. A Memory therefore grows with the
// number of distinct resources it has seen.
type Memory struct {
	// mu guards only the resources map (looking up and creating entries);
	// it is never held while a write runs. Each entry's mu serialises
	// check-and-record for its resource and is held by Do for the whole of
	// the write callback. entry.latest is written only with entry.mu held,
	// and is atomic so that Latest can read it without waiting for a write
	// in progress.
	mu        sync.Mutex           // guards resources
	resources map[string]*memEntry // resource -> entry, created on first use
}

type memEntry struct {
	mu     sync.Mutex   // serialises check-and-record and Do's write
	latest atomic.Int64 // newest accepted token; written only with mu held
}

// entry returns the entry for resource, creating it if needed.
func (m *Memory) entry(resource string) *memEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.resources[resource]
	if e == nil {
		if m.resources == nil {
			m.resources = make(map[string]*memEntry)
		}
		e = new(memEntry)
		m.resources[resource] = e
	}
	return e
}

// admit is check-and-record; e.mu must be held.
func (e *memEntry) admit(resource string, token int64) error {
	latest := e.latest.Load()
	if token < latest {
		return &StaleError{Resource: resource, Token: token, Latest: latest}
	}
	// token >= latest, so max(latest, token) == token.
	e.latest.Store(token)
	return nil
}

// Check atomically checks token against the newest token accepted for
// resource and records it: it returns nil and records token if token >=
// that newest token, and a *StaleError (errors.Is(err, ErrStale)) without
// recording anything otherwise. An empty resource or a token <= 0 gives
// an error wrapping ErrInvalid.
//
// Check waits for a Do on the same resource that is still running its
// write, so a write made right after a successful Check cannot overtake
// the write of an older, already admitted holder that is still in
// progress. It cannot order writes made outside the guard against each
// other, though: prefer Do, which runs the write under the guard.
func (m *Memory) Check(resource string, token int64) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	e := m.entry(resource)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.admit(resource, token)
}

// Do checks and records token like Check and, if it is accepted, runs
// write while still holding the resource's guard, so that no holder with
// an older token can write in between and no write of a newer holder can
// start before this one has returned. A refused token returns a
// *StaleError without calling write. Do returns write's error unchanged.
//
// The token is recorded before write runs and stays recorded if write
// fails or panics: a failed write may still have had partial effects,
// and the holder was legitimately the newest, so recording it is the safe
// choice (only this holder or newer ones may write afterwards).
//
// write must not call Check or Do for the same resource on the same
// Memory: the guard is not reentrant and that would deadlock. A nil
// write gives an error wrapping ErrInvalid.
func (m *Memory) Do(resource string, token int64, write func() error) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	if write == nil {
		return fmt.Errorf("%w: nil write func for resource %q", ErrInvalid, resource)
	}
	e := m.entry(resource)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.admit(resource, token); err != nil {
		return err
	}
	return write()
}

// Latest returns the newest token accepted for resource, or 0 if none has
// been. It does not wait for a write in progress.
func (m *Memory) Latest(resource string) int64 {
	m.mu.Lock()
	e := m.resources[resource]
	m.mu.Unlock()
	if e == nil {
		return 0
	}
	return e.latest.Load()
}
