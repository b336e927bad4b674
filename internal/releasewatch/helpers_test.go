package releasewatch_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// await fails the test unless c yields within d.
func await(t *testing.T, c <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
	}
}

// drain empties a waiter's pending wake-up.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// ownGoroutines returns the stacks of the goroutines running this package's code, other than
// the caller's.
func ownGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var own []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i > 0 && strings.Contains(g, "internal/releasewatch.") && !strings.Contains(g, "internal/releasewatch_test.") {
			own = append(own, g)
		}
	}
	return strings.Join(own, "\n\n")
}

// goroutinesAfterClose returns the package's goroutines still there shortly after Close
// returned. An owner has done its last work when Close returns (its WaitGroup's Done is its
// last deferred call) but may take a moment more to leave the stack.
func goroutinesAfterClose() string {
	left := ownGoroutines()
	for deadline := time.Now().Add(time.Second); left != "" && time.Now().Before(deadline); left = ownGoroutines() {
		time.Sleep(5 * time.Millisecond)
	}
	return left
}

// numSub returns how many connections the server counts as subscribed to channel.
func numSub(ctx context.Context, c redis.UniversalClient, channel string, sharded bool) (int64, error) {
	if sharded {
		n, err := c.PubSubShardNumSub(ctx, channel).Result()
		return n[channel], err
	}
	n, err := c.PubSubNumSub(ctx, channel).Result()
	return n[channel], err
}

// awaitNumSub waits until the server counts want subscribers of channel.
func awaitNumSub(t *testing.T, ctx context.Context, c redis.UniversalClient, channel string, sharded bool, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := numSub(ctx, c, channel, sharded)
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d subscribers (err %v), want %d", channel, n, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
