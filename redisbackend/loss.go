package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// WatchLoss implements driver.LossWatcher: the server pushes word of every change to the
// lock's key (CLIENT TRACKING), and the Backend reads the key again to see whether the lock
// is still the lease's. A dropped connection, a restart, a failover or a flush makes it read
// every watched key again as soon as it reconnects. Without tracking (a client other than a
// go-redis Client or ClusterClient, a server before Redis 6) it watches nothing, and the
// renewals tell as before.
func (b *Backend) WatchLoss(lease driver.Lease, lost func(error)) (stop func()) {
	if b.err != nil || b.closed.Load() || lease.Limit > 0 {
		return func() {} // a permit's loss is learnt from its renewals
	}
	return b.loss.watch(b, lease, lost)
}

var _ driver.LossWatcher = (*Backend)(nil)

// lossWatch is the Backend's one tracking session and the locks it watches. The session is
// open while anything is watched: a goroutine opens it with the first watch, reads each key
// that needs it, and closes it lossLinger after the last watch stopped, or at Backend.Close.
//
// Locking: mu guards every field; the goroutine reads and calls lost without it.
type lossWatch struct {
	mu      sync.Mutex
	keys    map[string][]*watched // by lock key
	due     []*watched            // to read: new, or changed since their last read
	poke    chan struct{}         // wakes the goroutine; buffered
	running bool
	off     bool // the Conn cannot track: watch nothing
}

// watched is one lease under watch.
type watched struct {
	key, name, owner string
	token            int64
	lost             func(error)
	queued           bool // in due
	stopped          bool // no longer watched
	// plain says the key is read as a plain key (GET), not as a hash (HMGET); flipped, that
	// the last read met the other form and switched. Only the watch's goroutine uses them.
	plain, flipped bool
}

func (lw *lossWatch) watch(b *Backend, l driver.Lease, lost func(error)) func() {
	// First read as the Backend writes a lock: a re-entered one, or one with metadata or a line,
	// is a hash, and the first read switches.
	w := &watched{key: b.Key(l.Name), name: l.Name, owner: l.Owner, token: l.Token, lost: lost, plain: b.form == ""}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.off {
		// A Conn that cannot track never will: watch nothing, with no goroutine to find that
		// out.
		_, tracks := b.c.(redisconn.Tracker)
		lw.off = !tracks
	}
	if lw.off {
		return func() {}
	}
	if lw.keys == nil {
		lw.keys = make(map[string][]*watched)
		lw.poke = make(chan struct{}, 1)
	}
	lw.keys[w.key] = append(lw.keys[w.key], w)
	lw.queueLocked(w)
	if !lw.running {
		lw.running = true
		b.bg.mu.Lock()
		if b.bg.closed {
			b.bg.mu.Unlock()
			lw.running = false
			lw.removeLocked(w)
			return func() {}
		}
		b.bg.wg.Add(1)
		b.bg.mu.Unlock()
		go lw.run(b)
	}
	lw.pokeLocked()
	return func() { lw.remove(w) }
}

func (lw *lossWatch) remove(w *watched) {
	lw.mu.Lock()
	lw.removeLocked(w)
	lw.pokeLocked() // the goroutine closes the session when nothing is left
	lw.mu.Unlock()
}

func (lw *lossWatch) removeLocked(w *watched) {
	w.stopped = true
	ws := lw.keys[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(lw.keys, w.key)
	} else {
		lw.keys[w.key] = ws
	}
}

// wake makes the goroutine look again (Backend.Close: to end).
func (lw *lossWatch) wake() {
	lw.mu.Lock()
	lw.pokeLocked()
	lw.mu.Unlock()
}

func (lw *lossWatch) pokeLocked() {
	select {
	case lw.poke <- struct{}{}:
	default:
	}
}

// queueLocked puts w among the keys to read; lw.mu is held.
func (lw *lossWatch) queueLocked(w *watched) {
	if !w.queued && !w.stopped {
		w.queued = true
		lw.due = append(lw.due, w)
	}
}

// changed is the session's word that keys changed (all of them when keys is nil).
func (lw *lossWatch) changed(keys []string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if keys == nil {
		for _, ws := range lw.keys {
			for _, w := range ws {
				lw.queueLocked(w)
			}
		}
	}
	for _, k := range keys {
		for _, w := range lw.keys[k] {
			lw.queueLocked(w)
		}
	}
	lw.pokeLocked()
}

// lossLinger is how long the session stays open after the last watch ended, so that a
// client taking one lock after another keeps one session instead of connecting for each.
const lossLinger = 2 * time.Second

// lossReadTimeout bounds one batch of reads of watched keys; retryRead is how long the
// goroutine waits to read again after a read failed, unless the session says sooner that it
// is back.
const (
	lossReadTimeout = 2 * time.Second
	retryRead       = time.Second
)

// run is the goroutine: it keeps the session open while anything is watched and reads the
// keys that need it. Backend.Close ends it and waits for it; it ends by itself once nothing
// was watched for lossLinger.
func (lw *lossWatch) run(b *Backend) {
	defer b.bg.wg.Done()
	var tr redisconn.Tracking
	defer func() {
		if tr != nil {
			tr.Close()
		}
	}()
	// watch starts no goroutine for a Conn that cannot track.
	tracker := b.c.(redisconn.Tracker)
	var idle time.Time // since when nothing is watched
	for {
		lw.mu.Lock()
		if b.closed.Load() || len(lw.keys) == 0 && !idle.IsZero() && time.Since(idle) >= lossLinger {
			lw.running = false
			lw.mu.Unlock()
			return
		}
		if len(lw.keys) == 0 {
			if idle.IsZero() {
				idle = time.Now()
			}
			lw.mu.Unlock()
			select {
			case <-lw.poke:
			case <-time.After(lossLinger - time.Since(idle)):
			}
			continue
		}
		idle = time.Time{}
		if tr == nil {
			var err error
			if tr, err = tracker.Track(lw.changed); err != nil {
				lw.off, lw.keys, lw.due, lw.running = true, nil, nil, false
				lw.mu.Unlock()
				return
			}
		}
		due := lw.due[:0:0]
		for _, w := range lw.due {
			w.queued = false
			if !w.stopped {
				due = append(due, w)
			}
		}
		lw.due = nil
		lw.mu.Unlock()
		failed := false
		for len(due) > 0 {
			k := min(len(due), lossReadBatch)
			if !lw.check(tr, due[:k]) {
				failed = true
			}
			due = due[k:]
		}
		wait := time.Hour
		if failed {
			wait = retryRead
		}
		select {
		case <-lw.poke:
		case <-time.After(wait):
		}
	}
}

// lossReadBatch is the most keys read in one round trip.
const lossReadBatch = 256

// check reads the keys of ws and calls lost for each lock that is not its lease's any more.
// A key that changes again during its read is queued again by changed, and read once more; a
// key found in the lock's other form (lock.lua) is read again at once in that form. It reports
// whether every read got an answer; those that got none are queued again.
func (lw *lossWatch) check(tr redisconn.Tracking, ws []*watched) bool {
	answered := true
	for len(ws) > 0 {
		reads := make([]redisconn.TrackedRead, 0, len(ws))
		for _, w := range ws {
			args := []any{"HMGET", w.key, "owner", "token"}
			if w.plain {
				args = []any{"GET", w.key}
			}
			reads = append(reads, redisconn.TrackedRead{Key: w.key, Args: args})
		}
		ctx, cancel := context.WithTimeout(context.Background(), lossReadTimeout)
		tr.Read(ctx, reads)
		cancel()
		var lost, again []*watched
		var why []error
		lw.mu.Lock()
		for i, w := range ws {
			gone, ok := verdict(w, reads[i].Reply, reads[i].Err)
			switch {
			case !ok:
				answered = false
				lw.queueLocked(w)
			case gone == errOtherForm:
				again = append(again, w)
			case gone != nil:
				if !w.stopped {
					lost, why = append(lost, w), append(why, gone)
				}
				lw.removeLocked(w)
			}
		}
		lw.mu.Unlock()
		for i, w := range lost {
			w.lost(why[i])
		}
		ws = again
	}
	return answered
}

// errOtherForm is verdict's word that the key holds the lock's other form, and that it
// switched w's reads to it.
var errOtherForm = errors.New("the lock's other form")

// verdict reads the reply of w's read: gone says why the lock is not w's any more, nil
// while it is; ok is false when the read got no answer.
func verdict(w *watched, reply any, err error) (gone error, ok bool) {
	switch {
	case redisconn.HasPrefix(err, "WRONGTYPE") && !w.flipped:
		w.plain, w.flipped = !w.plain, true
		return errOtherForm, true
	case redisconn.HasPrefix(err, "WRONGTYPE"):
		return fmt.Errorf("%w: the server says the key of %q was overwritten with another type", driver.ErrNotHeld, w.name), true
	case err != nil:
		return nil, false
	}
	w.flipped = false
	owner, token, ours := holder(reply)
	switch {
	case !ours:
		return fmt.Errorf("%w: the server says the key of %q was overwritten with a value fencelock did not write", driver.ErrNotHeld, w.name), true
	case owner == "":
		return fmt.Errorf("%w: the server says the key of %q was deleted or expired", driver.ErrNotHeld, w.name), true
	case owner != w.owner || token != w.token:
		return fmt.Errorf("%w: the server says %q is now held by another lock (token %d)", driver.ErrNotHeld, w.name, token), true
	}
	return nil, true
}

// holder reads a lock's owner and token from HMGET owner token, or from GET of a plain key
// ('<token> <hold id> <owner>', see lock.lua); ours is false for a string not of that form.
func holder(reply any) (owner string, token int64, ours bool) {
	if s, ok := reply.(string); ok {
		t, rest, ok := strings.Cut(s, " ")
		_, owner, ok2 := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(t, 10, 64)
		if !ok || !ok2 || err != nil || owner == "" {
			return "", 0, false
		}
		return owner, n, true
	}
	v, _ := reply.([]any)
	if len(v) != 2 {
		return "", 0, true
	}
	owner, _ = v[0].(string)
	t, _ := v[1].(string)
	token, _ = strconv.ParseInt(t, 10, 64)
	return owner, token, true
}
