package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redlock"
	"github.com/redis/go-redis/v9"
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

// A renewal that finds the lock gone on a node, while a majority confirms it, takes it back
// there, best effort. That must not keep the call past its context's deadline: it kept a
// Refresh, or a Release under a minimum hold, up to the node timeout late. The retake goes on
// after the renewal returned, and still lands.
func TestRenewReturnsByDeadlineWhileRetaking(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNodes(t, 3)
	req := driver.Request{Name: "retake", Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	g, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// A renewal first, so that its script is loaded on every node: the one below is one call.
	lease := driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL, Token: g.Token}
	if r := b.Renew(ctx, []driver.Lease{lease}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	b.Settle()
	key := b.Key(req.Name)
	if err := direct[0].(*redis.Client).Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	// Node 0 answers the renewal at once (the key is gone), the others 100 ms later, so that
	// node 0's answer is in when the majority decides; the retake on node 0 is 1 s late.
	late[0].hold(0, time.Second)
	late[1].hold(100 * time.Millisecond)
	late[2].hold(100 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := b.Renew(short, []driver.Lease{lease})
	took := time.Since(start)
	if r[0].Err != nil {
		t.Fatalf("renew: %v", r[0].Err)
	}
	if took > 400*time.Millisecond+100*time.Millisecond {
		t.Fatalf("the renewal returned %v after the call, with a 400ms deadline", took.Round(time.Millisecond))
	}
	waitFor(t, 10*time.Second, "node 0 did not take the lock back", func() bool { return owners(direct, key)[0] == req.Owner })
}
