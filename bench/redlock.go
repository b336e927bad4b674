package main

import (
	"context"
	"time"
)

// redlockRow compares one library on 5 independent nodes with itself on 1.
type redlockRow struct {
	library   string
	one, five latencyRow
	floor     time.Duration // p50 of the floor on node 0, in the same run
}

// runRedlock measures uncontended cycles of every library that has a 5-node (Redlock)
// entry, on 5 nodes and on node 0 alone, interleaved like the latency scenario, with the
// floor on node 0 for reference.
func runRedlock(ctx context.Context, cfg *config, es []*Entry, addrs []string, pids []int) ([]redlockRow, error) {
	var run []*Entry
	var libs []string
	for _, e := range es {
		if e.Floor {
			run = append(run, e)
		}
	}
	for _, e5 := range es {
		if e5.Nodes != 5 {
			continue
		}
		for _, e1 := range es {
			if e1.Library == e5.Library && e1.Nodes == 1 && e1.Uncontended {
				run = append(run, e1, e5)
				libs = append(libs, e5.Library)
				break
			}
		}
	}
	if len(libs) == 0 {
		return nil, nil
	}
	lat, err := runLatency(ctx, cfg, run, addrs, pids, cfg.redlockCycles, "rl")
	if err != nil {
		return nil, err
	}
	rows := make([]redlockRow, len(libs))
	for i, lib := range libs {
		rows[i].library = lib
		for _, r := range lat {
			switch {
			case r.entry.Floor:
				rows[i].floor = r.p50
			case r.entry.Library == lib && r.entry.Nodes == 1:
				rows[i].one = r
			case r.entry.Library == lib && r.entry.Nodes == 5:
				rows[i].five = r
			}
		}
	}
	return rows, nil
}
