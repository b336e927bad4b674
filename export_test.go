package fencelock

import "time"

// FireDeadlinesEarly makes every hold's deadline timer also fire at once, in a goroutine of its
// own that runs up to wait before the hold stores its timer: as the scheduler may run it. It
// returns what undoes it.
func FireDeadlinesEarly(wait time.Duration) (restore func()) {
	afterFunc = func(d time.Duration, f func()) *time.Timer {
		early := make(chan struct{})
		go func() {
			defer close(early)
			f()
		}()
		select {
		case <-early:
		case <-time.After(wait):
		}
		return time.AfterFunc(d, f)
	}
	return func() { afterFunc = time.AfterFunc }
}

// WatchdogScans returns how many scans c's watchdog loop has made.
func WatchdogScans(c *Client) int {
	c.dog.mu.Lock()
	defer c.dog.mu.Unlock()
	return c.dog.scans
}
