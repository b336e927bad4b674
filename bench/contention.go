package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// contentionRow is one contender's workers fighting over one lock.
type contentionRow struct {
	entry            *Entry
	elapsed          time.Duration
	acquisitions     int
	changes          int // owner changes: acquisitions by a worker other than the last holder
	changesPerSec    float64
	waitP50, waitP99 time.Duration
	waitMax          time.Duration
	jain             float64
	failures         int // Obtain errors before the end of the round
	overlaps         int // a worker entered the critical section while another was in it
	releaseErrs      int
	firstErr         error
	perWorker        []int
}

// runContention runs cfg.workers workers per contender, each with a contender (a client) of
// its own as separate processes would have, on one name: blocking Obtain, a critical section
// of cfg.critical (busy, not a sleep: Go timers are coarser than that), Release, again. The
// round's context ends after cfg.contention/rounds; waits still going on then are not
// counted.
func runContention(ctx context.Context, cfg *config, es []*Entry, addrs []string) ([]contentionRow, error) {
	workers := make([][]Contender, len(es))
	defer func() {
		for _, cs := range workers {
			closeAll(cs)
		}
	}()
	for i, e := range es {
		for range cfg.workers {
			c, err := e.New(addrs[:e.Nodes])
			if err != nil {
				return nil, fmt.Errorf("%s: connect: %w", e.Label(), err)
			}
			workers[i] = append(workers[i], c)
		}
		for w, c := range workers[i] {
			if err := warmCycle(ctx, c, fmt.Sprintf("ct:warm:%d:%d", i, w)); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", e.Label(), err)
			}
		}
	}
	rows := make([]contentionRow, len(es))
	waits := make([]durations, len(es))
	for i := range rows {
		rows[i].entry = es[i]
		rows[i].perWorker = make([]int, cfg.workers)
	}
	slot := max(cfg.contention/time.Duration(cfg.rounds), time.Millisecond)
	rounds := newRounds(len(es))
	for r := range cfg.rounds {
		for _, i := range rounds.next() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			w := contend(ctx, workers[i], "ct:"+strconv.Itoa(i)+":"+strconv.Itoa(r), slot, cfg.critical)
			row := &rows[i]
			row.elapsed += slot
			row.changes += w.changes
			row.failures += w.failures
			row.overlaps += w.overlaps
			row.releaseErrs += w.releaseErrs
			if row.firstErr == nil {
				row.firstErr = w.firstErr
			}
			for k, n := range w.counts {
				row.perWorker[k] += n
				row.acquisitions += n
			}
			waits[i] = append(waits[i], w.waits...)
		}
	}
	for i := range rows {
		row := &rows[i]
		s := waits[i].sorted()
		row.waitP50, row.waitP99, row.waitMax = s.quantile(0.5), s.quantile(0.99), s.quantile(1)
		row.changesPerSec = float64(row.changes) / row.elapsed.Seconds()
		row.jain = jain(row.perWorker)
	}
	return rows, nil
}

// contendResult is one round of one contender.
type contendResult struct {
	counts      []int
	waits       durations
	changes     int
	failures    int
	overlaps    int
	releaseErrs int
	firstErr    error
}

func contend(parent context.Context, cs []Contender, name string, slot, critical time.Duration) contendResult {
	ctx, cancel := context.WithTimeout(parent, slot)
	defer cancel()
	var (
		inside            atomic.Int32
		last              atomic.Int32
		changes, overlaps atomic.Int64
		mu                sync.Mutex
		res               = contendResult{counts: make([]int, len(cs))}
		wg                sync.WaitGroup
	)
	last.Store(-1)
	for w, c := range cs {
		wg.Go(func() {
			var waits durations
			count, failures, releaseErrs := 0, 0, 0
			var firstErr error
			for ctx.Err() == nil {
				t0 := time.Now()
				h, err := c.Obtain(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						failures++
						if firstErr == nil {
							firstErr = err
						}
					}
					continue
				}
				got := time.Now()
				counted := ctx.Err() == nil
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if prev := last.Swap(int32(w)); prev != int32(w) && prev != -1 && counted {
					changes.Add(1)
				}
				for t := time.Now(); time.Since(t) < critical; {
				}
				inside.Add(-1)
				if err := h.Release(context.WithoutCancel(ctx)); err != nil {
					releaseErrs++
					if firstErr == nil {
						firstErr = fmt.Errorf("release: %w", err)
					}
				}
				if counted {
					count++
					waits = append(waits, got.Sub(t0))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.counts[w] = count
			res.waits = append(res.waits, waits...)
			res.failures += failures
			res.releaseErrs += releaseErrs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
		})
	}
	wg.Wait()
	res.changes, res.overlaps = int(changes.Load()), int(overlaps.Load())
	return res
}
