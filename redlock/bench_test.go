package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// BenchmarkVersusSingleNode interleaves, in every iteration, an uncontended TryObtain and
// Release on five Redlock nodes and the same on the single-node backend over one of them, so
// that drift on a noisy machine hits both alike; it reports each one's median and their ratio.
// Redlock costs two rounds of five parallel calls to obtain (grant, then the token write-back)
// and one to release, against one call each.
func BenchmarkVersusSingleNode(b *testing.B) {
	ctx := context.Background()
	rl := newLocker(b, newBackend(b, dial(b, addrs)))
	one := redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = one.Close() })
	single := newLocker(b, redisbackend.New(one))
	cycle := func(c *fencelock.Client, name string) {
		lock, err := c.TryObtain(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cycle(rl, "bench:redlock") // connections and scripts in place
	cycle(single, "bench:single")
	var singles, redlocks []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		cycle(single, "bench:single")
		t1 := time.Now()
		cycle(rl, "bench:redlock")
		t2 := time.Now()
		singles, redlocks = append(singles, t1.Sub(t0)), append(redlocks, t2.Sub(t1))
	}
	slices.Sort(singles)
	slices.Sort(redlocks)
	s, r := singles[len(singles)/2], redlocks[len(redlocks)/2]
	b.ReportMetric(float64(s.Microseconds()), "single-p50-µs")
	b.ReportMetric(float64(r.Microseconds()), "redlock-p50-µs")
	b.ReportMetric(float64(r)/float64(s), "ratio")
}

// BenchmarkHandoff measures how soon a waiter blocked in Obtain holds the lock after the
// holder's Release returns, on five nodes: p50 and p99 in µs. The waiter wakes on the first
// node's release message; a handoff can even come before Release returns, which counts as 0.
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	holder := newLocker(b, newBackend(b, dial(b, addrs)))
	waiting := make(chan struct{}, 1)
	wb := newBackend(b, dial(b, addrs))
	waiter := newLocker(b, wb, fencelock.WithObserver(func(e fencelock.Event) {
		if e.Kind == fencelock.EventWaiting {
			waiting <- struct{}{}
		}
	}))
	nodes, channel := dial(b, addrs), wb.Key("bench:handoff")+":released"
	handoffs := make([]time.Duration, 0, 1024)
	for b.Loop() {
		lock, err := holder.Obtain(ctx, "bench:handoff")
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			l, err := waiter.Obtain(ctx, "bench:handoff")
			at := time.Now()
			if err != nil {
				b.Error(err)
			} else {
				_ = l.Release(ctx)
			}
			got <- at
		}()
		// The waiter found the lock held, and listens on a majority of the nodes (from the
		// last round, when its subscription lingers).
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			b.Fatal("the waiter never began to wait")
		}
		waitListening(b, nodes, channel, len(nodes)/2+1)
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		handoffs = append(handoffs, max((<-got).Sub(released), 0))
	}
	slices.Sort(handoffs)
	b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "p99-µs")
}
