// Package pause waits out a retry's backoff, the one way the Client and the backends do.
package pause

import (
	"context"
	"time"
)

// For waits d, and reports false when ctx ends first (at once when it has ended; a d of zero
// or less only looks at ctx).
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
