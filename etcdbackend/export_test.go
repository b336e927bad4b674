package etcdbackend

import clientv3 "go.etcd.io/etcd/client/v3"

// StopKeepAlive stops the keep-alive of every lease of b without revoking it, as if the process
// had stopped talking to etcd: the leases expire after their TTL.
func (b *Backend) StopKeepAlive() {
	b.mu.Lock()
	sessions := b.sessions
	b.mu.Unlock()
	for _, s := range sessions {
		s.stop()
		<-s.exited
	}
}

// Leases returns the IDs of b's leases.
func (b *Backend) Leases() []clientv3.LeaseID {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []clientv3.LeaseID
	for _, s := range b.sessions {
		ids = append(ids, s.id)
	}
	return ids
}

// WatchAllUpTo sets how many keys ahead a waiter watches at once, until the test ends.
func WatchAllUpTo(t interface{ Cleanup(func()) }, n int64) {
	was := watchAllUpTo
	watchAllUpTo = n
	t.Cleanup(func() { watchAllUpTo = was })
}

// Pending is how many clean-ups b has still to finish: releases owed, the one being made, and
// the writes whose callers left before their outcome was known.
func (b *Backend) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.owed.Len() + len(b.flying)
}
