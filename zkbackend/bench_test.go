package zkbackend_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// BenchmarkLockUnlock measures one uncontended lock and unlock with fencelock and with
// go-zookeeper's zk.Lock, interleaved on the same server and connection, each reusing one
// name, and reports both medians and their ratio.
func BenchmarkLockUnlock(b *testing.B) {
	conn := dial(b, server.Addr, nil)
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
func BenchmarkHandoff(b *testing.B) {
	holderConn, waiterConn := dial(b, server.Addr, nil), dial(b, server.Addr, nil)
	admin := dial(b, server.Addr, nil)
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
	p50 := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	a, z := p50(ours), p50(theirs)
	b.ReportMetric(a, "fencelock-p50-µs")
	b.ReportMetric(z, "zklock-p50-µs")
	if z > 0 {
		b.ReportMetric(a/z, "ratio")
	}
}
