package redisbackend

// LossWatchRunning reports whether the Backend's loss watch goroutine runs.
func (b *Backend) LossWatchRunning() bool {
	b.loss.mu.Lock()
	defer b.loss.mu.Unlock()
	return b.loss.running
}
