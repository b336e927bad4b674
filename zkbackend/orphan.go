package zkbackend

import (
	"errors"

	"github.com/fencelock/fencelock"
)

// orphan is a lock node this Backend may have left in a queue: a create whose reply was lost
// and whose node could not be looked for, or a waiter's node that could not be removed when
// its wait ended. Left alone, it would reach the head of the line and hold the lock for no one
// until its session ended. The removal is owed while the session lasts.
type orphan struct {
	name, guid  string
	owner, hold string
	session     int64
}

func (b *Backend) abandon(o orphan) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.orphans = append(b.orphans, o)
}

// sweep removes the orphans it can, and keeps the others for the next call. Every Acquire,
// AcquireQueued and Release sweeps first; the Client releases right after an acquisition fails
// in a way that may have left a node, so a sweep follows every orphan soon.
func (b *Backend) sweep() {
	b.mu.Lock()
	todo := b.orphans
	b.orphans = nil
	b.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	var keep []orphan
	for _, o := range todo {
		// A node made under a session that has since ended is gone with it. Session 0 is
		// unknown: look.
		if (o.session == 0 || o.session == b.conn.SessionID()) && !b.clear(o) {
			keep = append(keep, o)
		}
	}
	if len(keep) > 0 {
		b.mu.Lock()
		b.orphans = append(b.orphans, keep...)
		b.mu.Unlock()
	}
}

// clear removes o's hold from its node, which deletes the node unless the owner re-entered it
// meanwhile. It reports whether nothing is owed any more.
func (b *Backend) clear(o orphan) bool {
	dir := b.Path(o.name)
	q, err := b.queue(dir)
	if err != nil {
		return false
	}
	e, ok := findGUID(q, o.guid)
	if !ok {
		return true
	}
	path := dir + "/" + e.name
	data, stat, err := b.read(path)
	if err == nil {
		_, err = b.releaseNode(holder{o.name, o.owner}, path, o.hold, data, stat.Version, true)
	}
	return err == nil || err == errVanished || errors.Is(err, fencelock.ErrInvalid)
}
