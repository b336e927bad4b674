package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redlock"
)

// An acquisition whose context ends while the nodes are still answering returns by the
// deadline: the release of what it may have taken runs in the background, after each node's
// call has landed, and leaves nothing behind.
func TestFailedAcquisitionReturnsByDeadline(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	_, as := startNodes(t, 3)
	direct := dial(t, as)
	via := make([]string, len(as))
	for i, a := range as {
		p := testserver.StartProxy(t, a)
		via[i] = p.Addr
		defer p.SetDelay(0)
		p.SetDelay(100 * time.Millisecond) // a 200 ms round trip
	}
	b := newBackend(t, dial(t, via), redlock.WithNodeTimeout(time.Second))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Acquire(short, driver.Request{Name: "deadline", Owner: "o", TTL: 10 * time.Second})
	if took := time.Since(start); took > 100*time.Millisecond+100*time.Millisecond {
		t.Fatalf("returned %v after the call, with a 100ms deadline (%v)", took.Round(time.Millisecond), err)
	}
	if err == nil {
		t.Fatal("acquired over 200 ms round trips within 100 ms")
	}
	waitFor(t, 10*time.Second, "the failed acquisition left the lock on the nodes", func() bool {
		return slices.Equal(owners(direct, b.Key("deadline")), make([]string, 3))
	})
}
