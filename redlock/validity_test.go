package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// proxiedNodes starts n servers of the test's own, each behind a proxy, and returns the
// proxies, their addresses and a client to each server that bypasses its proxy.
func proxiedNodes(t *testing.T, n int) ([]*testserver.Proxy, []string, []redisbackend.Client) {
	t.Helper()
	_, as := startNodes(t, n)
	proxies, via := proxied(t, as)
	return proxies, via, dial(t, as)
}

// warm opens conns connections in each client's pool and loads the package's scripts on
// every node (through a Backend over direct clients), so that later calls over slow links
// cost one round trip each: a new connection costs several (connect, HELLO, CLIENT SETINFO).
func warm(t *testing.T, clients, direct []redisbackend.Client, conns int) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	var wg sync.WaitGroup
	for _, c := range clients {
		for range conns {
			wg.Go(func() {
				rc := c.(*redis.Client)
				if err := rc.Ping(ctx).Err(); err != nil {
					t.Error(err)
				}
				// Pipelines take connections of their own.
				if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	b := newBackend(t, direct)
	req := driver.Request{Name: "warm-up", Owner: "warm-up", TTL: time.Second}
	lease := driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}
	for _, c := range direct { // a token round, to load its script too
		if err := c.(*redis.Client).Set(ctx, b.Key(req.Name)+":fence", time.Now().UnixMicro()+1e9, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if r := b.Renew(ctx, []driver.Lease{lease}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if _, err := b.Release(ctx, lease, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// counted is the validity the Client counts from a backend's answer: Validity when it is
// positive and below the TTL, else the TTL.
func counted(v, ttl time.Duration) time.Duration {
	if v > 0 && v < ttl {
		return v
	}
	return ttl
}

// driftOf is the Client's drift allowance for a validity v.
func driftOf(v time.Duration) time.Duration { return v/100 + 2*time.Millisecond }

// holdUntil fails the test unless a majority of the nodes keep the key at least until t: the
// time a backend or a Client vouched for. A node's expiry is read as PTTL, in whole
// milliseconds, so a node counts when t is before read-time + PTTL + 1ms.
func holdUntil(t *testing.T, clients []redisbackend.Client, key string, until time.Time, what string) {
	t.Helper()
	keep := 0
	var left []time.Duration
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		pttl, err := c.(*redis.Client).PTTL(ctx, key).Result()
		read := time.Now()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, pttl)
		if pttl > 0 && until.Before(read.Add(pttl+time.Millisecond)) {
			keep++
		}
	}
	if keep < len(clients)/2+1 {
		t.Fatalf("%s: vouched for %v from now, but only %d nodes keep the key that long (PTTLs %v)", what, time.Until(until), keep, left)
	}
}

// A grant's and a renewal's validity count from the send (backend.go): the nodes keep the lock
// a TTL after they received the request, which is after the call began. A backend that
// subtracts its round trip, or the drift the Client subtracts again, vouches for less than
// the nodes keep, and a lock over slow links is trusted for a fraction of its TTL.
func TestValidityCountsFromTheSend(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	proxies, via, direct := proxiedNodes(t, 3)
	clients := dial(t, via)
	warm(t, clients, direct, 2)
	for _, p := range proxies {
		p.SetDelay(100 * time.Millisecond) // a round trip of 200 ms
	}
	b := newBackend(t, clients, redlock.WithNodeTimeout(time.Second))
	ttl := 2 * time.Second
	req := driver.Request{Name: "from-send", Owner: "o", TTL: ttl}

	// The first call also asks every node for its run_id: one more round trip before the
	// acquire is sent, which Elapsed says.
	start := time.Now()
	g, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	v := counted(g.Validity, ttl)
	t.Logf("grant after %v: validity %v, elapsed %v", time.Since(start).Round(time.Millisecond), g.Validity, g.Elapsed)
	if g.Elapsed+v < ttl {
		t.Fatalf("the grant vouches for %v after the call began (elapsed %v + validity %v); the nodes keep the lock a TTL (%v) after its send", g.Elapsed+v, g.Elapsed, v, ttl)
	}
	holdUntil(t, direct, b.Key(req.Name), start.Add(g.Elapsed+v), "grant")

	start = time.Now()
	r := b.Renew(ctx, []driver.Lease{{Name: req.Name, Owner: req.Owner, TTL: ttl}})
	if r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	v = counted(r[0].Validity, ttl)
	if v < ttl {
		t.Fatalf("the renewal vouches for %v after the call began, the nodes keep the lock a TTL (%v) after its send", v, ttl)
	}
	holdUntil(t, direct, b.Key(req.Name), start.Add(v), "renewal")
	if _, err := b.Release(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: ttl}, ""); err != nil {
		t.Fatal(err)
	}
}

// Over links with a round trip of 40% of the TTL, a Client obtains a Redlock lock, trusts it
// for the TTL less the drift allowance from the send, and its watchdog keeps it: each renewal
// that every node confirms moves the deadline a TTL past its send. (The first renewal can
// only be sent once the grant has arrived, and must be back before the deadline: two round
// trips within the TTL less the drift.)
func TestClientKeepsALockOverSlowLinks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		identified bool // the nodes' run_ids are known before the delay starts
	}{
		// The first acquisition also identifies the nodes: two round trips, 80% of the TTL.
		{"first acquisition", false},
		{"nodes identified", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 60*time.Second)
			proxies, via, direct := proxiedNodes(t, 3)
			clients := dial(t, via)
			warm(t, clients, direct, 4)
			ttl := time.Second
			b := newBackend(t, clients, redlock.WithNodeTimeout(900*time.Millisecond))
			c := newLocker(t, b)
			if tc.identified {
				if _, err := c.Inspect(ctx, "slow-links"); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range proxies {
				p.SetDelay(200 * time.Millisecond) // a round trip of 400 ms
			}
			lost := make(chan error, 1)
			before := time.Now()
			lock, err := c.TryObtain(ctx, "slow-links", fencelock.WithTTL(ttl), fencelock.WithOnLost(func(_ string, err error) {
				select {
				case lost <- err:
				default:
				}
			}))
			if err != nil {
				t.Fatalf("TryObtain over 400 ms round trips, TTL %v: %v", ttl, err)
			}
			t.Logf("obtained after %v, valid for %v more", time.Since(before).Round(time.Millisecond), time.Until(lock.ValidUntil()).Round(time.Millisecond))
			if want := before.Add(ttl - driftOf(ttl)); lock.ValidUntil().Before(want) {
				t.Fatalf("trusted until %v after the call began, want at least %v", lock.ValidUntil().Sub(before), want.Sub(before))
			}
			holdUntil(t, direct, b.Key("slow-links"), lock.ValidUntil(), "the Client's deadline")

			time.Sleep(3 * ttl)
			select {
			case err := <-lost:
				t.Fatalf("lost while every node confirmed the renewals: %v", err)
			default:
			}
			if err := lock.Valid(); err != nil {
				t.Fatalf("after %v: %v", 3*ttl, err)
			}
			holdUntil(t, direct, b.Key("slow-links"), lock.ValidUntil(), "the Client's deadline after renewals")
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The leases of one renewal batch share one pipeline per node, and each keeps its own node
// timeout: a lease with a short TTL, and so a short node timeout, must not cut short the wait
// for the others.
func TestShortLeaseInARenewalBatch(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	proxies, via, direct := proxiedNodes(t, 3)
	clients := dial(t, via)
	warm(t, clients, direct, 2)
	b := redlock.New(clients) // the default node timeouts: min(50ms, TTL/10)
	t.Cleanup(func() { _ = b.Close() })
	long := driver.Lease{Name: "batch-long", Owner: "o", TTL: 10 * time.Second}
	short := driver.Lease{Name: "batch-short", Owner: "o", TTL: 100 * time.Millisecond} // 10 ms
	if _, err := b.Acquire(ctx, driver.Request{Name: long.Name, Owner: long.Owner, TTL: long.TTL}); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.SetDelay(10 * time.Millisecond) // a round trip of 20 ms: within 50 ms, beyond 10 ms
	}
	// A busy machine can make a round trip take more than 50 ms: a few tries.
	var errs []error
	for range 5 {
		r := b.Renew(ctx, []driver.Lease{long, short})
		if r[0].Err == nil {
			return
		}
		errs = append(errs, r[0].Err)
	}
	t.Fatalf("the long lease was never renewed in a batch with a short one: %v", errs)
}
