package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// A node call that had to wait for the owner's call before it on its node (a release behind
// the acquisition's call to a slow node) still gets its whole time to answer: sent with only
// what the wait left of it, it was cut off mid-reply, and go-redis closes a connection whose
// call ended under it. Under load that made a storm: every new connection's handshake made the
// next calls late in turn, and no call reached a majority (the nemesis saw 1 grant in 207 calls).
func TestCallAfterWaitKeepsItsConnection(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	_, as := startNodes(t, 3)
	slow := testserver.StartProxy(t, as[0])
	via := slices.Clone(as)
	via[0] = slow.Addr
	direct := dial(t, as)
	clients := dial(t, via)
	// A node timeout above the 500 ms linger is the least a call has from its send, and sets
	// the test's scale: the margins below are fractions of it, wide enough for a busy machine.
	const timeout = 2 * time.Second
	b := newBackend(t, clients, redlock.WithNodeTimeout(timeout))
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(30*time.Second), fencelock.WithWatchdog(false)))
	// Warm up: the nodes are seen, a connection each, and the scripts loaded, so that each call
	// below is one round trip.
	lock, err := c.TryObtain(ctx, "linger")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the warm-up's lock still on a node", func() bool {
		return slices.Equal(owners(direct, b.Key("linger")), make([]string, 3))
	})
	waitFor(t, 5*time.Second, "the warm-up's last replies read", func() bool { return !slices.ContainsFunc(clients, inCall) })
	before := connectionsReceived(ctx, t, direct[0].(*redis.Client))

	// Each round trip to node 0 takes 70% of the timeout: within what a call has from its
	// send, but the release's call there waits that long for the acquisition's call first, and
	// 30% would be all it had left.
	slow.SetDelay(timeout * 7 / 20)
	lock, err = c.TryObtain(ctx, "linger") // nodes 1 and 2 grant it at once
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "node 0 still keeps the lock", func() bool {
		return owners(direct, b.Key("linger"))[0] == ""
	})
	// The release's call there was the last: its reply is read, or the call was cut off.
	waitFor(t, 15*time.Second, "the calls to node 0 landed or cut off", func() bool { return !inCall(clients[0]) })
	slow.SetDelay(0)
	if _, err := c.Inspect(ctx, "linger"); err != nil {
		t.Fatal(err)
	}
	if after := connectionsReceived(ctx, t, direct[0].(*redis.Client)); after != before {
		t.Fatalf("node 0 received %d new connections: a call was cut off mid-reply", after-before)
	}
}

// inCall reports whether a call holds a connection of c, or waits for one: a connection goes
// back to the pool once its reply is read, and is closed when its call is cut off.
func inCall(c redisbackend.Client) bool {
	s := c.(*redis.Client).PoolStats()
	return s.TotalConns != s.IdleConns || s.PendingRequests != 0
}

// connectionsReceived reads the server's count of connections it accepted (INFO stats).
func connectionsReceived(ctx context.Context, t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no total_connections_received")
	return 0
}

// A node timeout above the 500 ms a call may run on after its fan-out stopped waiting is the
// node timeout, from the call's send: nodes that answer in 700 ms, under a 2 s node timeout,
// grant, renew and release the lock. Each call used to end 500 ms after its send whatever the
// option said, and every node counted as failed. An operation still returns by its context's
// deadline, plus the README's 100 ms slack: the calls it stops waiting for go on behind it.
func TestNodeTimeoutAboveTheLinger(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	_, as := startNodes(t, 3)
	direct := dial(t, as)
	proxies, via := proxied(t, as)
	b := newBackend(t, dial(t, via), redlock.WithNodeTimeout(2*time.Second))
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(30*time.Second), fencelock.WithWatchdog(false)))
	// Warm up: the nodes are seen, a connection each, and the scripts loaded, so that each call
	// below is one round trip (a first EVALSHA costs two, a first connection more).
	lock, err := c.TryObtain(ctx, "patient")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inspect(ctx, "patient"); err != nil {
		t.Fatal(err)
	}
	b.Settle()
	for _, p := range proxies {
		p.SetDelay(350 * time.Millisecond) // a 700 ms round trip
	}
	lock, err = c.TryObtain(ctx, "patient")
	if err != nil {
		t.Fatalf("TryObtain over 700 ms round trips with a 2 s node timeout: %v", err)
	}
	if err := lock.Refresh(ctx, 30*time.Second); err != nil {
		t.Fatalf("Refresh over 700 ms round trips with a 2 s node timeout: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release over 700 ms round trips with a 2 s node timeout: %v", err)
	}
	waitFor(t, 10*time.Second, "the released lock still on a node", func() bool {
		return slices.Equal(owners(direct, b.Key("patient")), make([]string, 3))
	})

	// Inspect and ForceRelease have no TTL to size their calls by, and give each node a second,
	// or the node timeout when it is longer: 1.2 s round trips are within it.
	for _, p := range proxies {
		p.SetDelay(600 * time.Millisecond)
	}
	if _, err := c.Inspect(ctx, "patient"); err != nil {
		t.Fatalf("Inspect over 1.2 s round trips with a 2 s node timeout: %v", err)
	}
	for _, p := range proxies {
		p.SetDelay(350 * time.Millisecond)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.TryObtain(short, "patient")
	if took := time.Since(start); took > 300*time.Millisecond+100*time.Millisecond {
		t.Fatalf("returned %v after the call, with a 300ms deadline (%v)", took.Round(time.Millisecond), err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryObtain over 700 ms round trips within 300 ms: %v, want the deadline's error", err)
	}
	waitFor(t, 10*time.Second, "the failed acquisition left the lock on the nodes", func() bool {
		return slices.Equal(owners(direct, b.Key("patient")), make([]string, 3))
	})
}
