package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// The floor: the plain SET NX PX and compare-and-delete pair every Redis lock is built on,
// on the same go-redis client. Compare BenchmarkObtainRelease against it.
var floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func BenchmarkFloorSetNXRelease(b *testing.B) {
	ctx := context.Background()
	rdb := singleClient(b)
	key := "bench:floor"
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		token := strconv.Itoa(i)
		ok, err := rdb.SetNX(ctx, key, token, 30*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := floorRelease.Run(ctx, rdb, []string{key}, token).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkObtainRelease is one uncontended TryObtain and Release, watchdog on: a round trip
// each, plus the fencing token, reentrancy bookkeeping and renewal scheduling.
func BenchmarkObtainRelease(b *testing.B) {
	for _, watchdog := range []bool{true, false} {
		b.Run(fmt.Sprintf("watchdog=%v", watchdog), func(b *testing.B) {
			ctx := context.Background()
			c := newLocker(b, singleClient(b))
			opt := fencelock.WithWatchdog(watchdog)
			b.ReportAllocs()
			for b.Loop() {
				lock, err := c.TryObtain(ctx, "bench:lock", opt)
				if err != nil {
					b.Fatal(err)
				}
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkObtainReleaseFreshNames is BenchmarkObtainRelease on a name never locked before
// at every cycle (the names are made before the clock starts), so that nothing kept of a
// recent name's keys helps.
func BenchmarkObtainReleaseFreshNames(b *testing.B) {
	ctx := context.Background()
	c := newLocker(b, singleClient(b))
	names := make([]string, 0, 1<<16)
	for i := range cap(names) {
		names = append(names, "bench:fresh:"+strconv.Itoa(i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lock, err := c.TryObtain(ctx, names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVersusFloor interleaves a floor cycle and a fencelock cycle in every iteration, so
// that drift on a noisy machine hits both alike, and reports each one's median and their ratio.
func BenchmarkVersusFloor(b *testing.B) {
	ctx := context.Background()
	rdb := singleClient(b)
	c := newLocker(b, rdb)
	var floor, ours []time.Duration
	for i := 0; b.Loop(); i++ {
		token := strconv.Itoa(i)
		t0 := time.Now()
		if ok, err := rdb.SetNX(ctx, "bench:vs-floor", token, 30*time.Second).Result(); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := floorRelease.Run(ctx, rdb, []string{"bench:vs-floor"}, token).Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		lock, err := c.TryObtain(ctx, "bench:vs-ours")
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		floor, ours = append(floor, t1.Sub(t0)), append(ours, t2.Sub(t1))
	}
	slices.Sort(floor)
	slices.Sort(ours)
	f, o := floor[len(floor)/2], ours[len(ours)/2]
	b.ReportMetric(float64(f.Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(o.Microseconds()), "fencelock-p50-µs")
	b.ReportMetric(float64(o)/float64(f), "ratio")
}

// BenchmarkHandoff measures how soon a waiter blocked in Obtain holds the lock after the
// holder's Release returns: p50 and p99 in µs, for the default wake-on-release wait and for a
// 1ms poller.
func BenchmarkHandoff(b *testing.B) {
	modes := []struct {
		name string
		opt  fencelock.Option
	}{
		{"wake-on-release", nil},
		{"poll-1ms", fencelock.WithRetry(fencelock.LinearBackoff(time.Millisecond))},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			ctx := context.Background()
			rdb := singleClient(b)
			waiting := make(chan struct{}, 1)
			holder, waiter := newLocker(b, rdb), newLocker(b, rdb, fencelock.WithObserver(func(e fencelock.Event) {
				if e.Kind == fencelock.EventWaiting {
					waiting <- struct{}{}
				}
			}))
			var opts []fencelock.Option
			if m.opt != nil {
				opts = append(opts, m.opt)
			}
			handoffs := make([]time.Duration, 0, 1024)
			key := redisbackend.New(rdb).Key("bench:handoff")
			for b.Loop() {
				lock, err := holder.Obtain(ctx, "bench:handoff")
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan time.Time, 1)
				go func() {
					l, err := waiter.Obtain(ctx, "bench:handoff", opts...)
					at := time.Now()
					if err != nil {
						b.Error(err)
					} else {
						_ = l.Release(ctx)
					}
					got <- at
				}()
				// The waiter found the lock held, and sleeps: polling, or in line once it
				// listens for its grant.
				select {
				case <-waiting:
				case <-time.After(10 * time.Second):
					b.Fatal("the waiter never began to wait")
				}
				if m.opt == nil {
					waitFor(b, 10*time.Second, "the waiter listening in line", func() bool { return listening(rdb, key) })
				}
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
				released := time.Now()
				handoffs = append(handoffs, max((<-got).Sub(released), 0))
			}
			slices.Sort(handoffs)
			b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkContended runs 8 clients obtaining and releasing one lock as fast as they can:
// completed critical sections per second.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	rdb := singleClient(b)
	clients := make([]*fencelock.Client, 8)
	for i := range clients {
		clients[i] = newLocker(b, rdb)
	}
	b.ReportAllocs()
	b.ResetTimer()
	next := make(chan *fencelock.Client, len(clients))
	for _, c := range clients {
		next <- c
	}
	b.RunParallel(func(pb *testing.PB) {
		c := <-next
		for pb.Next() {
			lock, err := c.Obtain(ctx, "bench:contended")
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					b.Error(err)
				}
				return
			}
			_ = lock.Release(ctx)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "locks/s")
}
