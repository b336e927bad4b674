package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// The semaphore scenario: fencelock's Semaphore beside what a Go team writes without it — no Go
// library keeps a Redis semaphore — the expirable-permit recipe of Redisson's
// RPermitExpirableSemaphore on go-redis: a sorted set of permit IDs scored by expiry, pruned
// and counted in one script, each permit a random ID, waiting by polling every millisecond.

// semLimit is the semaphore's limit in the scenario, semTTL its permits' TTL.
const (
	semLimit = 2
	semTTL   = 10 * time.Second
)

// semaphoreRow is one contender's figures.
type semaphoreRow struct {
	label, note   string
	samples       int
	p50, p99      time.Duration // one permit taken and given back, uncontended
	grants        int           // contended: permits granted
	elapsed       time.Duration // contended: time the workers ran
	overlaps      int           // contended: times more than semLimit holders were inside at once
	failures      int
	firstErr      error
	grantsPerSec  float64
	waitP50, wait time.Duration // contended: time from asking to holding, p50 and p99
	perWorker     []int         // contended: grants per worker, for Jain's index
}

// semContender takes a permit and gives it back.
type semContender struct {
	label, note string
	acquire     func(ctx context.Context, name string) (release func(context.Context) error, err error)
	close       func()
}

var recipeAcquire = redis.NewScript(`-- KEYS[1] the permits: a sorted set of permit IDs by expiry (ms)
-- ARGV[1] the limit, ARGV[2] the permit ID, ARGV[3] the TTL in ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0`)

// newSemContenders returns fencelock's Semaphore and the recipe, each on its own go-redis
// client.
func newSemContenders(addr string) []semContender {
	rdb := newGoRedis(addr)
	b := redisbackend.New(rdb)
	c := fencelock.New(b)
	fl := semContender{label: "fencelock Semaphore", note: "first come, first served line in Redis, woken by a release message; a token per permit, the watchdog",
		acquire: func(ctx context.Context, name string) (func(context.Context) error, error) {
			p, err := c.Semaphore(name, semLimit).Acquire(ctx, fencelock.WithTTL(semTTL))
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		},
		close: func() { _ = c.Close(); _ = b.Close(); _ = rdb.Close() }}
	rr := newGoRedis(addr)
	var seq atomic.Int64
	recipe := semContender{label: "recipe: sorted set of expiring permits (go-redis)", note: "polls every 1 ms while full; no order among waiters, no token, no renewal",
		acquire: func(ctx context.Context, name string) (func(context.Context) error, error) {
			id := "p" + strconv.FormatInt(seq.Add(1), 10)
			key := "recipe:{" + name + "}"
			for {
				n, err := recipeAcquire.Run(ctx, rr, []string{key}, semLimit, id, semTTL.Milliseconds()).Int()
				if err != nil {
					return nil, err
				}
				if n == 1 {
					return func(ctx context.Context) error { return rr.ZRem(ctx, key, id).Err() }, nil
				}
				if !sleepCtx(ctx, time.Millisecond) {
					return nil, ctx.Err()
				}
			}
		},
		close: func() { _ = rr.Close() }}
	return []semContender{fl, recipe}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runSemaphore times, per contender, an uncontended acquire and release (interleaved cycle by
// cycle), then cfg.workers goroutines taking permits of one semaphore of semLimit, holding
// each for cfg.critical, in rounds.
func runSemaphore(ctx context.Context, cfg *config, srv *server) ([]semaphoreRow, error) {
	cs := newSemContenders(srv.Addr)
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	rows := make([]semaphoreRow, len(cs))
	lat := make([]durations, len(cs))
	samples := max(cfg.cycles/10, 10)
	for i, c := range cs {
		rows[i].label, rows[i].note = c.label, c.note
		for w := range cfg.warmup / 10 {
			if err := semCycle(ctx, c, "sem:warm:"+strconv.Itoa(w)); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", c.label, err)
			}
		}
	}
	for s := range samples {
		for i, c := range cs {
			start := time.Now()
			if err := semCycle(ctx, c, "sem:lat:"+strconv.Itoa(s%64)); err != nil {
				return nil, fmt.Errorf("%s: %w", c.label, err)
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	waits := make([]durations, len(cs))
	slot := max(cfg.contention/time.Duration(cfg.rounds), time.Millisecond)
	rounds := newRounds(len(cs))
	for r := range cfg.rounds {
		for _, i := range rounds.next() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			res := semContend(ctx, cs[i], "sem:ct:"+strconv.Itoa(r), cfg.workers, slot, cfg.critical)
			row := &rows[i]
			if row.perWorker == nil {
				row.perWorker = make([]int, cfg.workers)
			}
			for k, n := range res.perWorker {
				row.perWorker[k] += n
			}
			row.grants += res.grants
			row.overlaps += res.overlaps
			row.failures += res.failures
			row.elapsed += slot
			if row.firstErr == nil {
				row.firstErr = res.first
			}
			waits[i] = append(waits[i], res.waits...)
		}
	}
	for i := range rows {
		s := lat[i].sorted()
		rows[i].samples, rows[i].p50, rows[i].p99 = len(lat[i]), s.quantile(0.5), s.quantile(0.99)
		w := waits[i].sorted()
		rows[i].waitP50, rows[i].wait = w.quantile(0.5), w.quantile(0.99)
		rows[i].grantsPerSec = float64(rows[i].grants) / rows[i].elapsed.Seconds()
	}
	return rows, nil
}

func semCycle(ctx context.Context, c semContender, name string) error {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	release, err := c.acquire(actx, name)
	if err != nil {
		return err
	}
	return release(actx)
}

// semRound is what one contended round saw.
type semRound struct {
	grants, overlaps, failures int
	first                      error
	waits                      durations
	perWorker                  []int
}

// semContend runs workers goroutines on one semaphore for d.
func semContend(ctx context.Context, c semContender, name string, workers int, d, critical time.Duration) semRound {
	res := semRound{perWorker: make([]int, workers)}
	var mu sync.Mutex
	var inside atomic.Int32
	until := time.Now().Add(d)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			var mine durations
			g, o, f := 0, 0, 0
			var ferr error
			for time.Now().Before(until) {
				actx, cancel := context.WithDeadline(ctx, until.Add(time.Second))
				asked := time.Now()
				release, err := c.acquire(actx, name)
				if err != nil {
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) {
						f++
						if ferr == nil {
							ferr = err
						}
					}
					continue
				}
				mine = append(mine, time.Since(asked))
				if inside.Add(1) > semLimit {
					o++
				}
				spin(critical)
				inside.Add(-1)
				g++
				if err := release(actx); err != nil {
					f++
					if ferr == nil {
						ferr = err
					}
				}
				cancel()
			}
			mu.Lock()
			res.grants, res.overlaps, res.failures = res.grants+g, res.overlaps+o, res.failures+f
			if res.first == nil {
				res.first = ferr
			}
			res.waits = append(res.waits, mine...)
			res.perWorker[k] = g
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

// spin keeps the CPU busy for d: Go timers are coarser than a critical section here.
func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}

// semaphoreSection is the report's section of the semaphore scenario.
func (r *report) semaphoreSection(sb *strings.Builder) {
	if len(r.semaphore) == 0 {
		return
	}
	fmt.Fprintf(sb, "## 8. Semaphore\n\n"+
		"No Go library keeps a semaphore in Redis; beside fencelock's runs the recipe a Go team would\n"+
		"write, Redisson's expirable permits on go-redis (a sorted set of permit IDs by expiry, pruned\n"+
		"and counted in one script). Uncontended: one permit of a semaphore of %d taken and given back,\n"+
		"the contenders interleaved cycle by cycle. Contended: %d goroutines on one semaphore of %d,\n"+
		"each holding its permit for %v (busy), in %d rounds; \"over the limit\" counts the times a\n"+
		"holder entered while %d were inside; Jain's index is over the grants per goroutine (1 when\n"+
		"every goroutine got as many).\n\n", semLimit, r.cfg.workers, semLimit, r.cfg.critical, r.cfg.rounds, semLimit)
	fl := r.semaphore[0]
	var rows [][]string
	for _, s := range r.semaphore {
		row := []string{s.label, fmt.Sprint(s.samples), µs(s.p50), µs(s.p99), ratio(float64(s.p50), float64(fl.p50)),
			fmt.Sprintf("%.0f/s", s.grantsPerSec), ratio(s.grantsPerSec, fl.grantsPerSec), fmt.Sprintf("%.3f", jain(s.perWorker)), ms(s.waitP50), ms(s.wait), fmt.Sprint(s.overlaps), failures(s.failures, s.firstErr)}
		rows = append(rows, row)
	}
	table(sb, []string{"contender", "samples", "p50", "p99", "p50 / fencelock", "contended grants", "grants / fencelock", "Jain's index", "wait p50", "wait p99", "over the limit", "failures"}, rows)
	for _, s := range r.semaphore {
		sb.WriteString("- " + s.label + ": " + s.note + "\n")
	}
	sb.WriteString("\n")
}
