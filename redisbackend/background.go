package redisbackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// cleanupTimeout bounds each piece of clean-up the Backend does in the background.
const cleanupTimeout = 2 * time.Second

// background is the Backend's clean-up that must outlive the call that needed it: taking a
// waiter out of line after its context ended, releasing a lock a WAIT refused. A call returns
// by its context's deadline; Close waits for this work.
//
// Locking: mu guards closed and the WaitGroup's Add, so that no work starts once Close waits.
type background struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// later runs fn in the background on a fresh context of cleanupTimeout, unless the Backend is
// closed. It reports whether fn will run.
func (bg *background) later(fn func(ctx context.Context)) bool {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.closed {
		return false
	}
	bg.wg.Add(1)
	go func() {
		defer bg.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		fn(ctx)
	}()
	return true
}

// close makes every later call refuse, and waits for the work under way.
func (bg *background) close() {
	bg.mu.Lock()
	bg.closed = true
	bg.mu.Unlock()
	bg.wg.Wait()
}

// errClosed is the error of every call made after Close.
var errClosed = fmt.Errorf("%w: redisbackend: Backend closed", driver.ErrClosed)
