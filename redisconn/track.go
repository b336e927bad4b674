package redisconn

import (
	"context"
	"errors"
)

// Tracker is implemented by Conns whose servers can push word that a key changed: the
// invalidation messages of client-side caching (CLIENT TRACKING, Redis 6 and later, Valkey).
// The Redis backend uses it to tell a holder at once that its lock's key was deleted,
// overwritten or lost to a restart, instead of at its next renewal.
type Tracker interface {
	// Track opens a tracking session; it connects in the background. Each key read through
	// the session is watched: the next time it changes after the read — written, deleted,
	// expired, evicted, flushed — the server pushes its name and changed is called with it. A
	// read watches a key once; read it again to go on watching.
	//
	// changed(nil) says that any key may have changed unseen and that none is watched: the
	// session (re)connected — the first time, or after a dropped connection, a restart or a
	// failover — or the server flushed its keys. It is called once the session can read again.
	// changed is called from one goroutine at a time and must not block.
	//
	// It returns ErrNoTracking when the client cannot hold such a session.
	Track(changed func(keys []string)) (Tracking, error)
}

// Tracking is one tracking session of a Tracker.
type Tracking interface {
	// Read runs each read, in one pipeline per master, and sets its Reply and Err; each key
	// read is watched from then on. Before the session connected, and after its connection
	// dropped until changed(nil) says it is back, the reads fail: read again then.
	Read(ctx context.Context, reads []TrackedRead)
	// Close ends the session and waits for its goroutines.
	Close()
}

// TrackedRead is one read of a Tracking: a read-only command whose first key is Key.
type TrackedRead struct {
	Key   string
	Args  []any // the command and its arguments
	Reply any   // set by Read
	Err   error // set by Read
}

// ErrNoTracking is Track's error for a client that cannot hold a tracking session.
var ErrNoTracking = errors.New("redisconn: this client cannot track keys")
