package zkbackend_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// eachMode runs bench as two sub-benchmarks, each on a server of its own: "fsync", as ZooKeeper
// is deployed (forceSync=yes), and "no-fsync", to show what the disk costs. FENCELOCK_ZK_CPU
// pins the server to those CPUs, away from the benchmark run under taskset on the others.
func eachMode(b *testing.B, bench func(b *testing.B, addr string)) {
	for _, mode := range []struct {
		name  string
		fsync bool
	}{{"fsync", true}, {"no-fsync", false}} {
		b.Run(mode.name, func(b *testing.B) {
			bench(b, zktest.Start(b, zktest.Options{Fsync: mode.fsync, CPU: os.Getenv("FENCELOCK_ZK_CPU")}).Addr)
		})
	}
}

// BenchmarkLockUnlock measures one uncontended lock and unlock with fencelock and with
// go-zookeeper's zk.Lock, interleaved on the same server and connection, each reusing one
// name, and reports both medians and their ratio.
func BenchmarkLockUnlock(b *testing.B) { eachMode(b, lockUnlock) }

func lockUnlock(b *testing.B, addr string) {
	conn := dial(b, addr, nil)
	locker := fencelock.New(newBackend(conn), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	b.Cleanup(func() { _ = locker.Close() })
	zl := zk.NewLock(conn, "/zklock/bench-lock-unlock", zk.WorldACL(zk.PermAll))
	ctx := context.Background()
	var ours, theirs []time.Duration

	fencelockRound := func() {
		start := time.Now()
		l, err := locker.Obtain(ctx, "bench-lock-unlock")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
	}
	zkRound := func() {
		start := time.Now()
		if err := zl.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := zl.Unlock(); err != nil {
			b.Fatal(err)
		}
		theirs = append(theirs, time.Since(start))
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // alternate who goes first, so neither always finds a warmer server
			fencelockRound()
			zkRound()
		} else {
			zkRound()
			fencelockRound()
		}
	}
	report(b, ours, theirs)
}

// BenchmarkHandoff measures the time from the holder's Release (Unlock) returning to the
// waiter, on another connection, holding the lock: the watch notification and whatever the
// waiter does after it. A waiter that holds before Release returns counts as zero.
func BenchmarkHandoff(b *testing.B) { eachMode(b, handoff) }

func handoff(b *testing.B, addr string) {
	holderConn, waiterConn := dial(b, addr, nil), dial(b, addr, nil)
	admin := dial(b, addr, nil)
	holderBackend := newBackend(holderConn)
	holder := fencelock.New(holderBackend, fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	waiter := fencelock.New(newBackend(waiterConn), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	b.Cleanup(func() { _ = holder.Close(); _ = waiter.Close() })
	const zkPath = "/zklock/bench-handoff"
	zkHolder := zk.NewLock(holderConn, zkPath, zk.WorldACL(zk.PermAll))
	zkWaiter := zk.NewLock(waiterConn, zkPath, zk.WorldACL(zk.PermAll))
	const name = "bench-handoff"
	dir := holderBackend.Path(name)
	ctx := context.Background()
	var ours, theirs []time.Duration
	held := make(chan time.Time, 1)

	for b.Loop() {
		lock, err := holder.Obtain(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		var next *fencelock.Lock
		go func() {
			l, err := waiter.Obtain(ctx, name)
			if err != nil {
				b.Error(err)
			}
			next = l
			held <- time.Now()
		}()
		waitInLine(b, admin, dir, 2)
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		ours = append(ours, max(0, (<-held).Sub(released)))
		if err := next.Release(ctx); err != nil {
			b.Fatal(err)
		}

		if err := zkHolder.Lock(); err != nil {
			b.Fatal(err)
		}
		go func() {
			if err := zkWaiter.Lock(); err != nil {
				b.Error(err)
			}
			held <- time.Now()
		}()
		waitInLine(b, admin, zkPath, 2)
		if err := zkHolder.Unlock(); err != nil {
			b.Fatal(err)
		}
		released = time.Now()
		theirs = append(theirs, max(0, (<-held).Sub(released)))
		if err := zkWaiter.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	report(b, ours, theirs)
}

// waitInLine waits until dir has n children.
func waitInLine(b *testing.B, conn *zk.Conn, dir string, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		children, _, err := conn.Children(dir)
		if err == nil && len(children) == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never had %d children: %v %v", dir, n, children, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func report(b *testing.B, ours, theirs []time.Duration) {
	a, z := quantile(ours, 0.5), quantile(theirs, 0.5)
	b.ReportMetric(a, "fencelock-p50-µs")
	b.ReportMetric(z, "zklock-p50-µs")
	if z > 0 {
		b.ReportMetric(a/z, "ratio")
	}
	b.ReportMetric(quantile(ours, 0.99), "fencelock-p99-µs")
	b.ReportMetric(quantile(theirs, 0.99), "zklock-p99-µs")
}

// quantile is the q-quantile of d in µs; it sorts d.
func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[min(int(q*float64(len(d))), len(d)-1)]) / float64(time.Microsecond)
}

// BenchmarkContended runs 8 workers, each on a connection of its own as separate processes
// would be, taking turns on one lock for a round of 500ms, fencelock's and zk.Lock's rounds
// interleaved; each iteration is one round of each. It reports owner changes per second, Jain's
// fairness index of the turns each worker got, and the p99 of the wait for the lock, for both.
func BenchmarkContended(b *testing.B) { eachMode(b, contended) }

func contended(b *testing.B, addr string) {
	const workers, round = 8, 500 * time.Millisecond
	type worker struct {
		locker *fencelock.Client
		zl     *zk.Lock
	}
	ws := make([]worker, workers)
	for i := range ws {
		conn := dial(b, addr, nil)
		ws[i].locker = fencelock.New(newBackend(conn), fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
		b.Cleanup(func() { _ = ws[i].locker.Close() })
		ws[i].zl = zk.NewLock(conn, "/zklock/bench-contended", zk.WorldACL(zk.PermAll))
	}
	type tally struct {
		changes int
		elapsed time.Duration
		counts  [workers]int
		waits   []time.Duration
	}
	var ours, theirs tally
	run := func(t *tally, take func(w worker) (func() error, error)) {
		var mu sync.Mutex
		last := -1
		until := time.Now().Add(round)
		start := time.Now()
		var wg sync.WaitGroup
		for i, w := range ws {
			wg.Go(func() {
				for time.Now().Before(until) {
					asked := time.Now()
					release, err := take(w)
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					t.waits = append(t.waits, time.Since(asked))
					t.counts[i]++
					if last != i {
						t.changes++
						last = i
					}
					mu.Unlock()
					if err := release(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		t.elapsed += time.Since(start)
	}
	ctx := context.Background()
	takeOurs := func(w worker) (func() error, error) {
		l, err := w.locker.Obtain(ctx, "bench-contended")
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	}
	takeTheirs := func(w worker) (func() error, error) { return w.zl.Unlock, w.zl.Lock() }
	fencelockRound := func() { run(&ours, takeOurs) }
	zkRound := func() { run(&theirs, takeTheirs) }
	// A round of each first, not counted: the server's JIT compiles its hot paths during the
	// first seconds of load, and whichever ran first would pay for it.
	var warm tally
	run(&warm, takeTheirs)
	run(&warm, takeOurs)
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			fencelockRound()
			zkRound()
		} else {
			zkRound()
			fencelockRound()
		}
	}
	rate := func(t tally) float64 { return float64(t.changes) / t.elapsed.Seconds() }
	b.ReportMetric(rate(ours), "fencelock-changes/s")
	b.ReportMetric(rate(theirs), "zklock-changes/s")
	if rate(theirs) > 0 {
		b.ReportMetric(rate(ours)/rate(theirs), "ratio")
	}
	b.ReportMetric(jain(ours.counts[:]), "fencelock-jain")
	b.ReportMetric(jain(theirs.counts[:]), "zklock-jain")
	b.ReportMetric(quantile(ours.waits, 0.99)/1000, "fencelock-wait-p99-ms")
	b.ReportMetric(quantile(theirs.waits, 0.99)/1000, "zklock-wait-p99-ms")
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
