package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// handoffRow is how soon a blocked waiter holds a released lock.
type handoffRow struct {
	entry         *Entry
	samples       int
	p50, p99, max time.Duration
	early         int // the waiter held the lock before the holder's Release returned
	failures      int
	firstErr      error
}

// handoffSettle is how long the holder keeps the lock before releasing it, so that the
// waiter has made its first attempt and is asleep in Obtain.
const handoffSettle = 5 * time.Millisecond

// runHandoff measures, per contender, the time from the holder's Release returning to the
// waiter (another client) holding the lock: cfg.handoffs samples per contender, spread over
// the rounds, and no more than cfg.handoffBudget of wall time per contender.
func runHandoff(ctx context.Context, cfg *config, es []*Entry, addrs []string) ([]handoffRow, error) {
	holders, err := connectAll(es, addrs)
	if err != nil {
		return nil, err
	}
	defer closeAll(holders)
	waiters, err := connectAll(es, addrs)
	if err != nil {
		return nil, err
	}
	defer closeAll(waiters)
	rows := make([]handoffRow, len(es))
	samples := make([]durations, len(es))
	spent := make([]time.Duration, len(es))
	perRound := max((cfg.handoffs+cfg.rounds-1)/cfg.rounds, 1)
	for i := range es {
		rows[i].entry = es[i]
		for k, c := range []Contender{holders[i], waiters[i]} {
			if err := warmCycle(ctx, c, fmt.Sprintf("ho:warm:%d:%d", i, k)); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", es[i].Label(), err)
			}
		}
	}
	rounds := newRounds(len(es))
	for range cfg.rounds {
		for _, i := range rounds.next() {
			name := "ho:" + strconv.Itoa(i)
			start := time.Now()
			for k := 0; k < perRound && len(samples[i])+rows[i].failures < cfg.handoffs && spent[i]+time.Since(start) < cfg.handoffBudget; k++ {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				d, early, err := handoff(ctx, holders[i], waiters[i], name)
				if err != nil {
					rows[i].failures++
					if rows[i].firstErr == nil {
						rows[i].firstErr = err
					}
					continue
				}
				if early {
					rows[i].early++
				}
				samples[i] = append(samples[i], d)
			}
			spent[i] += time.Since(start)
		}
	}
	for i := range rows {
		s := samples[i].sorted()
		rows[i].samples = len(s)
		rows[i].p50, rows[i].p99, rows[i].max = s.quantile(0.5), s.quantile(0.99), s.quantile(1)
	}
	return rows, nil
}

type waited struct {
	at  time.Time
	h   Held
	err error
}

// handoff is one sample: the holder takes name, the waiter blocks in Obtain, the holder
// releases; the result is the time from Release returning to Obtain returning, 0 when the
// waiter got there first (early).
func handoff(parent context.Context, holder, waiter Contender, name string) (d time.Duration, early bool, err error) {
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	h, err := holder.TryObtain(ctx, name)
	if err != nil {
		return 0, false, fmt.Errorf("holder: %w", err)
	}
	got := make(chan waited, 1)
	go func() {
		w, err := waiter.Obtain(ctx, name)
		got <- waited{time.Now(), w, err}
	}()
	time.Sleep(handoffSettle)
	select {
	case w := <-got:
		if w.err == nil {
			_ = w.h.Release(ctx)
		}
		_ = h.Release(ctx)
		return 0, false, fmt.Errorf("the waiter returned while the lock was held: %v", w.err)
	default:
	}
	if err := h.Release(ctx); err != nil {
		cancel()
		if w := <-got; w.err == nil {
			_ = w.h.Release(context.Background())
		}
		return 0, false, fmt.Errorf("holder release: %w", err)
	}
	released := time.Now()
	w := <-got
	if w.err != nil {
		return 0, false, fmt.Errorf("waiter: %w", w.err)
	}
	if err := w.h.Release(ctx); err != nil {
		return 0, false, fmt.Errorf("waiter release: %w", err)
	}
	d = w.at.Sub(released)
	if d < 0 {
		return 0, true, nil
	}
	return d, false, nil
}
