package etcdbackend_test

import (
	"context"
	"os"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
)

// fsyncModes are the two ways the benchmarks run etcd: as deployed (fsync on) and with etcd's
// unsafe no-fsync setting, to show what the disk costs.
var fsyncModes = []struct {
	name    string
	noFsync bool
}{{"fsync", false}, {"no-fsync", true}}

// benchCluster starts the benchmarks' etcd in a process of its own, as a deployed etcd runs
// apart from its clients, so that the CPU and the allocations measured are the clients'.
// FENCELOCK_ETCD_CPU pins it to those CPUs, away from the benchmark run under taskset on the
// others.
func benchCluster(b *testing.B, noFsync bool) *etcdtest.Cluster {
	return etcdtest.Start(b, etcdtest.Options{NoFsync: noFsync, Process: true, CPU: os.Getenv("FENCELOCK_ETCD_CPU")})
}

// allocSamples are read by allocs, which allocates nothing itself; the benchmarks that call
// it run one goroutine.
var allocSamples = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}}

// allocs is how many heap objects this process has allocated so far.
func allocs() uint64 {
	metrics.Read(allocSamples)
	return allocSamples[0].Value.Uint64() + allocSamples[1].Value.Uint64()
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkVersusMutex interleaves, in every iteration, one lock+unlock through fencelock and
// one through etcd's own concurrency.Mutex on the same cluster, each first in every other
// iteration (the second of a pair runs on a warmer cluster), and reports both medians and their
// ratio, and the heap objects each allocates per cycle (with whatever the client's background
// goroutines allocate meanwhile: fencelock's watchdog, gRPC's transport).
func BenchmarkVersusMutex(b *testing.B) {
	for _, mode := range fsyncModes {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			cluster := benchCluster(b, mode.noFsync)
			be, cli := newBackend(b, cluster)
			locker := newLocker(b, be)
			sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			defer sess.Close()
			mu := concurrency.NewMutex(sess, "/bench/mutex")
			ours, theirs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			var ourAllocs, theirAllocs uint64
			mutex := func() {
				a0, t0 := allocs(), time.Now()
				if err := mu.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := mu.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				theirs = append(theirs, time.Since(t0))
				theirAllocs += allocs() - a0
			}
			fence := func() {
				a0, t0 := allocs(), time.Now()
				lock, err := locker.Obtain(ctx, "bench-ours", fencelock.WithTTL(10*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
				ours = append(ours, time.Since(t0))
				ourAllocs += allocs() - a0
			}
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					mutex()
					fence()
				} else {
					fence()
					mutex()
				}
			}
			o, m := p50(ours), p50(theirs)
			b.ReportMetric(float64(o.Microseconds()), "fencelock-p50-µs")
			b.ReportMetric(float64(m.Microseconds()), "mutex-p50-µs")
			b.ReportMetric(float64(o)/float64(m), "ratio")
			b.ReportMetric(float64(ourAllocs)/float64(len(ours)), "fencelock-allocs/cycle")
			b.ReportMetric(float64(theirAllocs)/float64(len(theirs)), "mutex-allocs/cycle")
		})
	}
}

// BenchmarkHandoff measures how soon a waiter blocked in Obtain (or Mutex.Lock) holds the lock
// after the holder's release returned.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range fsyncModes {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			cluster := benchCluster(b, mode.noFsync)
			b.Run("fencelock", func(b *testing.B) {
				hb, _ := newBackend(b, cluster)
				wb, _ := newBackend(b, cluster)
				holder, waiter := newLocker(b, hb), newLocker(b, wb)
				var handoffs []time.Duration
				for b.Loop() {
					lock, err := holder.Obtain(ctx, "bench-handoff")
					if err != nil {
						b.Fatal(err)
					}
					got := make(chan time.Time, 1)
					go func() {
						l, err := waiter.Obtain(ctx, "bench-handoff")
						at := time.Now()
						if err != nil {
							b.Error(err)
						} else {
							_ = l.Release(ctx)
						}
						got <- at
					}()
					time.Sleep(5 * time.Millisecond) // the waiter is queued and watching
					if err := lock.Release(ctx); err != nil {
						b.Fatal(err)
					}
					released := time.Now()
					handoffs = append(handoffs, max((<-got).Sub(released), 0))
				}
				b.ReportMetric(float64(p50(handoffs).Microseconds()), "p50-µs")
			})
			b.Run("mutex", func(b *testing.B) {
				_, hc := newBackend(b, cluster)
				_, wc := newBackend(b, cluster)
				hs, err := concurrency.NewSession(hc, concurrency.WithTTL(10))
				if err != nil {
					b.Fatal(err)
				}
				defer hs.Close()
				ws, err := concurrency.NewSession(wc, concurrency.WithTTL(10))
				if err != nil {
					b.Fatal(err)
				}
				defer ws.Close()
				var handoffs []time.Duration
				for b.Loop() {
					hm := concurrency.NewMutex(hs, "/bench/handoff")
					if err := hm.Lock(ctx); err != nil {
						b.Fatal(err)
					}
					got := make(chan time.Time, 1)
					go func() {
						wm := concurrency.NewMutex(ws, "/bench/handoff")
						err := wm.Lock(ctx)
						at := time.Now()
						if err != nil {
							b.Error(err)
						} else {
							_ = wm.Unlock(ctx)
						}
						got <- at
					}()
					time.Sleep(5 * time.Millisecond)
					if err := hm.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
					released := time.Now()
					handoffs = append(handoffs, max((<-got).Sub(released), 0))
				}
				b.ReportMetric(float64(p50(handoffs).Microseconds()), "p50-µs")
			})
		})
	}
}

var _ = etcdbackend.New

// BenchmarkContended runs 8 clients, each with its own backend as separate processes would,
// taking turns on one lock, and reports owner changes per second and Jain's fairness index of
// the turns each got.
func BenchmarkContended(b *testing.B) {
	for _, mode := range fsyncModes {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			cluster := benchCluster(b, mode.noFsync)
			const workers = 8
			lockers := make([]*fencelock.Client, workers)
			for i := range lockers {
				be, _ := newBackend(b, cluster)
				lockers[i] = newLocker(b, be)
			}
			counts := make([]int, workers)
			var last atomic.Int64
			changes := atomic.Int64{}
			b.ResetTimer()
			var wg sync.WaitGroup
			per := max(b.N/workers, 1)
			for i, l := range lockers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						lock, err := l.Obtain(ctx, "bench-contended")
						if err != nil {
							b.Error(err)
							return
						}
						counts[i]++
						if last.Swap(int64(i)) != int64(i) {
							changes.Add(1)
						}
						_ = lock.Release(ctx)
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(changes.Load())/b.Elapsed().Seconds(), "owner-changes/s")
			b.ReportMetric(jain(counts), "jain")
		})
	}
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one got everything.
func jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}
