package zkbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// holder identifies a lock, or a permit of a semaphore, held for an owner.
type holder struct {
	name, owner string
	permit      bool
}

func keyOf(name, owner string, limit int) holder { return holder{name, owner, limit > 0} }

// holding is the Backend's copy of a lock node that holds a lock for an owner: enough to
// renew, re-enter and release it in one round trip. Every write made from it is a
// compare-and-set on version, so a stale copy (another Backend with the same owner wrote
// since) costs a retry, never a wrong write.
type holding struct {
	path    string
	token   int64 // the node's czxid
	session int64 // the session that owns the ephemeral node
	version int32
	data    lockData
	read    time.Time // the send of the read this copy came from
	crowded bool      // others were in line behind the node when it was granted
}

func holdingOf(path string, data lockData, stat *zk.Stat, read time.Time) holding {
	return holding{
		path:    path,
		token:   stat.Czxid,
		session: stat.EphemeralOwner,
		version: stat.Version,
		data:    data,
		read:    read,
	}
}

// guid is the GUID in the node's name.
func (h holding) guid() string { return parseGUID(h.path[len(parent(h.path))+1:]) }

// granted is the grant of h, first in line and holding the acquisition's hold. sent is the send
// of the request that made the grant or found it in place, start when the call began;
// confirmed says that request was a write, which the leader itself answered, or that a sync of
// the connection sent with it has been answered.
//
// What it vouches for is the session that owns the node: the server keeps it, and the node,
// at least one session timeout after hearing from it. A node of this Backend's session is kept
// that long after sent — after a read, only once a sync has shown that the server answering
// still follows the leader, and that the session lived there (see witness). A node of another
// session is vouched for through that session's connection, from the send of a confirmation
// made now.
func (b *Backend) granted(ctx context.Context, start time.Time, h holding, sent time.Time, confirmed bool) (driver.Grant, error) {
	keep := b.validity
	if h.session == b.conn.SessionID() {
		if err := b.endWatched(ctx); err != nil {
			return driver.Grant{}, err
		}
	}
	switch {
	case h.session != b.conn.SessionID():
		var err error
		if sent, keep, err = b.witness(ctx, h, nil); err != nil {
			return driver.Grant{}, err
		}
	case !confirmed:
		if err := b.sync(ctx, b.conn, h.path); err != nil {
			return driver.Grant{}, classify(err)
		}
	}
	if h.session != b.conn.SessionID() && !b.vouchable(h.session) {
		return driver.Grant{}, fmt.Errorf("%w: the session that owns %s ended as its lock was granted", driver.ErrUnavailable, h.path)
	}
	return driver.Grant{Token: h.token, Count: h.data.count(), Validity: keep, Elapsed: max(0, sent.Sub(start))}, nil
}

// lost reports whether h's node ended with its session. go-zookeeper replaces the session ID
// when the server reports the old session expired, and the server deletes an expired
// session's ephemeral nodes, so a connection whose session changed means every lock node made
// under the old one is gone, whoever holds the lock now; so does a connection closed (end.go).
func (b *Backend) lost(h holding) bool {
	_, _, live := b.sessionOf(h.session)
	return live == endedSession
}

// holding returns a copy of what the Backend knows of k's lock node.
func (b *Backend) holding(k holder) (holding, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.held[k]
	if !ok {
		return holding{}, false
	}
	return *h, true
}

func (b *Backend) remember(k holder, h holding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[k] = &h
}

// update records a write to path, if path is still k's lock node.
func (b *Backend) update(k holder, path string, data lockData, version int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[k]; h != nil && h.path == path {
		h.data, h.version = data, version
	}
}

// crowdedAt reports whether k's node at path had others in line behind it when granted: its
// release then deletes the node alone, since the directory is theirs too (see remove).
func (b *Backend) crowdedAt(k holder, path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.held[k]
	return h != nil && h.path == path && h.crowded
}

// busy reports whether dir held others' nodes when this Backend last looked, and records
// what it saw when set is given. join then creates its node in the directory at once, rather
// than try to create the directory with it first: a write that fails costs the server a
// transaction too.
func (b *Backend) busy(dir string, set ...bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(set) > 0 {
		if !set[0] {
			delete(b.busyDirs, dir)
		} else if len(b.busyDirs) < maxBusyDirs {
			b.busyDirs[dir] = struct{}{}
		}
	}
	_, ok := b.busyDirs[dir]
	return ok
}

// maxBusyDirs bounds what busy remembers: past it, a directory is assumed free of others.
const maxBusyDirs = 1024

// forget drops k's lock node, if it is still path.
func (b *Backend) forget(k holder, path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[k]; h != nil && h.path == path {
		delete(b.held, k)
	}
}
