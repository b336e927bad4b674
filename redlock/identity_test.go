package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redlock"
)

// The first call asks every node for its run_id, and the calls that come meanwhile wait for
// that check; each waits only as long as its own context allows. Here the check waits a second
// for a stopped node (an Inspect's node timeout), and an Acquire with 100 ms to go must not
// wait that second with it.
func TestCallsWaitingForTheFirstCheckKeepTheirDeadline(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	servers, as := startNodes(t, 3)
	b := newBackend(t, dial(t, as))
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[2].Resume() })
	checked := make(chan error, 1)
	go func() {
		_, err := b.Inspect(ctx, "first-check")
		checked <- err
	}()
	// The Inspect is checking the nodes: nodes 0 and 1 ran its INFO, node 2 keeps it waiting.
	direct := dial(t, as[:2])
	waitFor(t, 10*time.Second, "the first check's INFO on nodes 0 and 1", func() bool {
		for _, c := range direct {
			list, err := c.(*redis.Client).ClientList(ctx).Result()
			if err != nil || !strings.Contains(list, " cmd=info ") {
				return false
			}
		}
		return true
	})
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Acquire(actx, driver.Request{Name: "first-check", Owner: "o", TTL: 10 * time.Second})
	took := time.Since(start)
	t.Logf("Acquire with a 100ms context: %v after %v", err, took.Round(time.Millisecond))
	if slack := 200 * time.Millisecond; took > 100*time.Millisecond+slack {
		t.Fatalf("Acquire with a 100ms context returned after %v: %v", took, err)
	}
	<-checked
}

// A node that has not told its run_id yet may be another node's server under a second address:
// its grant does not count towards an acquisition's majority, and its confirmation must not
// count towards a renewal's either. Here the third client reaches node 1's server through a
// proxy that was silent while the nodes were identified; with node 0 stopped, only one server
// keeps the lock, and a renewal that counted it twice would vouch for a majority.
func TestRenewalDoesNotCountAnUnidentifiedNode(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	servers, as := startNodes(t, 2)
	alias := testserver.StartProxy(t, as[1])
	clients := dial(t, []string{as[0], as[1], alias.Addr})
	b := newBackend(t, clients)
	alias.Blackhole() // the first acquisition's run_id check gets no answer from the alias
	lease := driver.Lease{Name: "alias", Owner: "o", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, driver.Request{Name: lease.Name, Owner: lease.Owner, TTL: lease.TTL}); err != nil {
		t.Fatal(err)
	}
	alias.Restore()
	if r := b.Renew(ctx, []driver.Lease{lease}); r[0].Err != nil {
		t.Fatalf("renewal with both servers up: %v", r[0].Err)
	}
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[0].Resume() })
	if r := b.Renew(ctx, []driver.Lease{lease}); r[0].Err == nil {
		t.Fatal("renewed by one server seen through two addresses")
	} else if !errors.Is(r[0].Err, fencelock.ErrUnavailable) && !errors.Is(r[0].Err, fencelock.ErrInvalid) {
		// ErrInvalid once a check has asked the alias and found the shared run_id.
		t.Fatalf("renewal: %v, want ErrUnavailable or ErrInvalid", r[0].Err)
	}
}

// With the default node timeout, a first acquisition with a short TTL allows each node 15 ms:
// less than a busy server, a slow link or a cold connection may take to answer the check that
// no two nodes are one server. A node not seen does not count, so a check cut that short kept
// every node out of the majority, and every acquisition failed until a check a second later.
func TestFirstShortAcquisitionLetsTheNodesIn(t *testing.T) {
	servers, addrs := startNodes(t, 3)
	b := redlock.New(dial(t, addrs, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
	t.Cleanup(func() { _ = b.Close() })
	c := newLocker(t, b)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, s := range servers { // busy for 100 ms, as the first acquisition comes
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	time.AfterFunc(100*time.Millisecond, func() {
		for _, s := range servers {
			_ = s.Resume()
		}
	})
	if l, err := c.TryObtain(ctx, t.Name()+":short", fencelock.WithTTL(150*time.Millisecond)); err == nil {
		_ = l.Release(ctx)
	} // it may miss its own 15 ms per node: what matters is what comes next
	direct := dial(t, addrs)
	waitFor(t, 5*time.Second, "the servers answering again", func() bool {
		for _, c := range direct {
			pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := c.(*redis.Client).Ping(pctx).Err()
			cancel()
			if err != nil {
				return false
			}
		}
		return true
	})
	var errs []error
	for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		l, err := c.TryObtain(ctx, t.Name()+":next", fencelock.WithTTL(2*time.Second))
		if err == nil {
			_ = l.Release(ctx)
			return
		}
		errs = append(errs, err)
	}
	t.Fatalf("%d acquisitions failed in the 600 ms after the servers answered again, the last: %v", len(errs), errs[len(errs)-1])
}
