package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// throughputRow is one contender's cycles per second with many goroutines.
type throughputRow struct {
	entry    *Entry
	cycles   int64
	elapsed  time.Duration
	perSec   float64
	failures int64
	firstErr error
	// CPU time per cycle: this process (the library and go-redis or rueidis) and the server.
	clientCPU, serverCPU time.Duration
	cpuClient, cpuServer float64 // seconds, summed over the rounds
}

// runThroughput runs cfg.goroutines goroutines on one contender (one client), each cycling
// TryObtain and Release on a name of its own, for cfg.throughput per contender split over
// the rounds.
func runThroughput(ctx context.Context, cfg *config, es []*Entry, srv *server) ([]throughputRow, error) {
	addrs := []string{srv.Addr}
	cs, err := connectAll(es, addrs)
	if err != nil {
		return nil, err
	}
	defer closeAll(cs)
	rows := make([]throughputRow, len(es))
	for i := range es {
		rows[i].entry = es[i]
		for k := range cfg.warmup {
			if err := warmCycle(ctx, cs[i], fmt.Sprintf("tp:warm:%d:%d", i, k)); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", es[i].Label(), err)
			}
		}
	}
	slot := max(cfg.throughput/time.Duration(cfg.rounds), time.Millisecond)
	rounds := newRounds(len(es))
	for range cfg.rounds {
		for _, i := range rounds.next() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var cycles, failures atomic.Int64
			var errOnce sync.Once
			var wg sync.WaitGroup
			s0, err := serverSnapshot(ctx, srv)
			if err != nil {
				return nil, err
			}
			c0 := cpuTime()
			start := time.Now()
			stop := start.Add(slot)
			for g := range cfg.goroutines {
				name := "tp:" + strconv.Itoa(i) + ":" + strconv.Itoa(g)
				wg.Go(func() {
					n := int64(0)
					for time.Now().Before(stop) && ctx.Err() == nil {
						if err := cycle(ctx, cs[i], name); err != nil {
							failures.Add(1)
							errOnce.Do(func() { rows[i].firstErr = err })
							continue
						}
						n++
					}
					cycles.Add(n)
				})
			}
			wg.Wait()
			rows[i].elapsed += time.Since(start)
			rows[i].cpuClient += cpuTime() - c0
			s1, err := serverSnapshot(ctx, srv)
			if err != nil {
				return nil, err
			}
			rows[i].cpuServer += s1.cpu - s0.cpu
			rows[i].cycles += cycles.Load()
			rows[i].failures += failures.Load()
		}
	}
	for i := range rows {
		rows[i].perSec = float64(rows[i].cycles) / rows[i].elapsed.Seconds()
		if n := float64(rows[i].cycles); n > 0 {
			rows[i].clientCPU = time.Duration(rows[i].cpuClient / n * 1e9)
			rows[i].serverCPU = time.Duration(rows[i].cpuServer / n * 1e9)
		}
	}
	return rows, nil
}
