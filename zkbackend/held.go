package zkbackend

import (
	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// holder identifies a lock held for an owner.
type holder struct{ name, owner string }

// holding is the Backend's copy of a lock node that holds a lock for an owner: enough to
// renew, re-enter and release it in one round trip. Every write made from it is a
// compare-and-set on version, so a stale copy (another Backend with the same owner wrote
// since) costs a retry, never a wrong write.
type holding struct {
	path    string
	token   int64 // the node's czxid
	session int64 // the session that owns the ephemeral node
	ours    bool  // session is, or was, this Backend's session
	version int32
	data    lockData
}

func (b *Backend) holdingOf(path string, data lockData, stat *zk.Stat) holding {
	return holding{
		path:    path,
		token:   stat.Czxid,
		session: stat.EphemeralOwner,
		ours:    stat.EphemeralOwner == b.conn.SessionID(),
		version: stat.Version,
		data:    data,
	}
}

func (b *Backend) grant(h holding) fencelock.Grant {
	return fencelock.Grant{Token: h.token, Count: h.data.count(), Validity: b.validity}
}

// lost reports whether h's node died with this Backend's session. go-zookeeper replaces the
// session ID when the server reports the old session expired, and the server deletes an
// expired session's ephemeral nodes, so a changed ID means every lock node made under the old
// one is gone, whoever holds the lock now.
func (b *Backend) lost(h holding) bool { return h.ours && h.session != b.conn.SessionID() }

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

// forget drops k's lock node, if it is still path.
func (b *Backend) forget(k holder, path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[k]; h != nil && h.path == path {
		delete(b.held, k)
	}
}
