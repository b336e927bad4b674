package etcdbackend

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
