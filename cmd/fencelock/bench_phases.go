package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
)

// The three phases of bench. Each runs until --duration passes or --ops operations are done,
// and releases what it holds on a context of its own, so that an interrupt leaves no lock
// behind.

// releaseCtx bounds a release on a context of its own, so that an interrupt still releases.
func releaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), benchCallTimeout)
}

// phaseDone reports whether a phase bounded by deadline and ops has run its course.
func phaseDone(ctx context.Context, deadline time.Time, o benchOptions, n int64) bool {
	return ctx.Err() != nil || !time.Now().Before(deadline) || (o.ops > 0 && n >= o.ops)
}

func (o benchOptions) fraction(start time.Time, n int64) float64 {
	f := float64(time.Since(start)) / float64(o.duration)
	if o.ops > 0 {
		f = max(f, float64(n)/float64(o.ops))
	}
	return min(f, 1)
}

func benchUncontended(ctx context.Context, s *store, o benchOptions, prog *benchProgress) (uncontendedResult, *latencyHist, error) {
	c := fencelock.New(s.backend)
	defer func() { _ = c.Close() }()
	h := &latencyHist{}
	start := time.Now()
	deadline := start.Add(o.duration)
	var n int64
	for !phaseDone(ctx, deadline, o, n) {
		t0 := time.Now()
		lock, err := c.TryObtain(ctx, o.name, fencelock.WithTTL(o.ttl))
		if err != nil {
			return uncontendedResult{}, nil, err
		}
		rctx, cancel := releaseCtx(ctx)
		err = lock.Release(rctx)
		cancel()
		if err != nil {
			return uncontendedResult{}, nil, err
		}
		h.add(time.Since(t0))
		n++
		prog.show("uncontended", o.fraction(start, n), n)
	}
	if ctx.Err() != nil {
		return uncontendedResult{}, nil, ctx.Err()
	}
	secs := time.Since(start).Seconds()
	return uncontendedResult{Ops: n, Seconds: secs, OpsPerSec: float64(n) / secs, Latency: h.stats()}, h, nil
}

// openClients opens n stores on raw, each with its own fencelock client, the way n processes
// would. closeAll closes them all.
func openClients(raw string, n int) (clients []*fencelock.Client, closeAll func(), err error) {
	var stores []*store
	closeAll = func() {
		for _, c := range clients {
			_ = c.Close()
		}
		for _, s := range stores {
			_ = s.close()
		}
	}
	for range n {
		s, err := openStore(raw)
		if err != nil {
			closeAll()
			return nil, func() {}, err
		}
		stores = append(stores, s)
		clients = append(clients, fencelock.New(s.backend))
	}
	return clients, closeAll, nil
}

func benchContended(ctx context.Context, raw string, o benchOptions, prog *benchProgress) (contendedResult, error) {
	clients, closeAll, err := openClients(raw, o.workers)
	if err != nil {
		return contendedResult{}, err
	}
	defer closeAll()

	pctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var (
		total, changes, overlaps, lost atomic.Int64
		holders                        atomic.Int32
		last                           atomic.Int64 // the previous holder's worker number, from 1
		lastDone                       atomic.Int64 // when the last release returned, ns since start
		firstErr                       error
		errOnce                        sync.Once
		wg                             sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	counts := make([]int64, o.workers) // counts[i] is written by worker i alone
	start := time.Now()
	for i, c := range clients {
		me := int64(i + 1)
		wg.Go(func() {
			for pctx.Err() == nil {
				lock, err := c.Obtain(pctx, o.name, fencelock.WithTTL(o.ttl))
				if err != nil {
					if pctx.Err() == nil {
						fail(fmt.Errorf("worker %d: %w", me, err))
					}
					return
				}
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				n := total.Add(1)
				counted := o.ops == 0 || n <= o.ops // past the quota, an acquisition is not counted
				if counted {
					if prev := last.Swap(me); prev != 0 && prev != me {
						changes.Add(1)
					}
					counts[i]++
				} else {
					total.Add(-1)
				}
				holders.Add(-1)
				if o.ops > 0 && n >= o.ops {
					cancel() // before the release, so that no waiter takes the lock again
				}
				rctx, rcancel := releaseCtx(ctx)
				err = lock.Release(rctx)
				rcancel()
				switch {
				case errors.Is(err, fencelock.ErrNotHeld):
					lost.Add(1)
				case err != nil:
					fail(fmt.Errorf("worker %d: %w", me, err))
					return
				}
				if counted {
					lastDone.Store(int64(time.Since(start)))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			prog.show("contended", o.fraction(start, total.Load()), total.Load())
		}
	}
	if firstErr != nil {
		return contendedResult{}, firstErr
	}
	if ctx.Err() != nil {
		return contendedResult{}, ctx.Err()
	}
	elapsed := time.Since(start)
	if o.ops > 0 && total.Load() >= o.ops {
		elapsed = time.Duration(lastDone.Load()) // not the waiters' way out
	}
	secs := max(elapsed.Seconds(), 1e-9)
	r := contendedResult{
		Workers: o.workers, Acquisitions: total.Load(), Seconds: secs,
		OwnerChanges: changes.Load(), PerWorker: counts, Overlaps: overlaps.Load(), Lost: lost.Load(),
		Fairness: jain(counts),
	}
	r.AcquisitionsPerSec = float64(r.Acquisitions) / secs
	r.OwnerChangesPerSec = float64(r.OwnerChanges) / secs
	return r, nil
}

// jain is Jain's fairness index (Σx)² / (n·Σx²): 1 when all are equal, 1/n when one has all.
func jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return math.Round(sum*sum/(float64(len(xs))*sq)*1000) / 1000
}

func benchHandoff(ctx context.Context, raw string, o benchOptions, settle time.Duration, prog *benchProgress) (handoffResult, error) {
	clients, closeAll, err := openClients(raw, 1)
	if err != nil {
		return handoffResult{}, err
	}
	defer closeAll()
	holder := clients[0]
	// The waiter's backend is wrapped to tell when it is blocked.
	ws, err := openStore(raw)
	if err != nil {
		return handoffResult{}, err
	}
	defer func() { _ = ws.close() }()
	probe, wrapped := newWaitProbe(ws.backend, settle)
	waiter := fencelock.New(wrapped)
	defer func() { _ = waiter.Close() }()

	type obtained struct {
		lock *fencelock.Lock
		at   time.Time
		err  error
	}
	h := &latencyHist{}
	start := time.Now()
	deadline := start.Add(o.duration)
	var n, ahead int64
	for !phaseDone(ctx, deadline, o, n) {
		held, err := holder.TryObtain(ctx, o.name, fencelock.WithTTL(o.ttl))
		if err != nil {
			return handoffResult{}, err
		}
		blocked := probe.arm()
		got := make(chan obtained, 1)
		wctx, wcancel := context.WithTimeout(ctx, o.ttl+benchCallTimeout)
		go func() {
			l, err := waiter.Obtain(wctx, o.name, fencelock.WithTTL(o.ttl))
			got <- obtained{l, time.Now(), err}
		}()
		var early *obtained
		select {
		case <-blocked:
		case r := <-got:
			early = &r
		}
		rctx, rcancel := releaseCtx(ctx)
		rerr := held.Release(rctx)
		released := time.Now()
		var r obtained
		if early != nil {
			r = *early
		} else {
			r = <-got
		}
		wcancel()
		if r.err == nil {
			if early != nil {
				_ = r.lock.Release(rctx)
				rcancel()
				return handoffResult{}, fmt.Errorf("the waiter obtained %q while the holder held it", o.name)
			}
			d := r.at.Sub(released)
			if d < 0 {
				ahead++
			}
			h.add(d)
			n++
			rerr = errors.Join(rerr, r.lock.Release(rctx))
		}
		rcancel()
		if err := errors.Join(r.err, rerr); err != nil {
			return handoffResult{}, err
		}
		prog.show("handoff", o.fraction(start, n), n)
	}
	if ctx.Err() != nil {
		return handoffResult{}, ctx.Err()
	}
	return handoffResult{Handoffs: n, Seconds: time.Since(start).Seconds(), Latency: h.stats(), AheadOfRelease: ahead}, nil
}
