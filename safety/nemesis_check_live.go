package safety

import (
	"math"
	"slices"
	"strings"
	"time"
)

const (
	// cleanupTimeout is the Client's (fencelock.WithCleanupTimeout's default): how long the
	// Client goes on, in the background, undoing a call that may have reached the store, or
	// releasing what a closed Client held.
	cleanupTimeout = 2 * time.Second
	// liveSlack is checker k's allowance for a loaded machine.
	liveSlack = time.Second
	// closedSlack is its allowance after a call that failed as its Client closed: it released
	// what it was granted before it returned, and only a reader that lags (a ZooKeeper
	// follower) may see the name held a little longer. The live TTLs (liveMaxTTL) are shorter
	// than liveSlack: a leftover of such a call would otherwise always be excused.
	closedSlack = 250 * time.Millisecond
)

// (k) A live name is held for no one when a probe finds it held (one attempt refused, and
// Inspect names the holder) and nothing in the history excuses that holder: no handle of its
// owner believed valid, no call of its owner in flight, no clean-up of its owner under way (the
// Client's EventCleanup ends one), no Client of a worker that held under it being closed, no
// fault of a server or of such a worker (see unexcused), for longer than the name's longest
// TTL, plus the Client's cleanup timeout, plus liveSlack. A correct backend frees a name by
// then: a key its holder no longer renews expires with its TTL, and one that a call whose
// context ended may have left is undone by the Client within the cleanup timeout (its
// EventCleanup says when), or by the Backend soon after. A call that failed because its Client
// closed while it waited (class closed) knows its outcome: it released what the store granted
// it before it returned, so when it is the last thing its owner did, the bound is closedSlack
// alone, unless the Client said it could not clean up (an EventCleanup with ErrClosed). A
// holder nothing in the history names (an owner no call reported) is left alone, and counted.
func (h *nemesisHistory) checkHeldForNone(v *nemesisVerdict) {
	type nameOwner struct{ name, owner string }
	spans := map[nameOwner][]interval{} // when each owner's handles and calls may have kept its hold
	workers := map[nameOwner][]int{}
	closedAt := map[nameOwner]int64{} // the return of its last call that failed as its Client closed
	gaveUp := map[nameOwner]bool{}    // a clean-up of it that the closed Client could not do
	longest := map[string]time.Duration{}
	ends := map[[2]int64]int64{} // per handle: the last event of it
	closes := map[int][]interval{}
	for _, e := range h.Events {
		switch {
		case e.K == "close":
			closes[e.W] = append(closes[e.W], interval{e.Start, e.Ret})
			v.Closes++
		case isLive(e.Name) && e.L != 0 && (e.K == "done" || e.K == "call"):
			k := [2]int64{int64(e.W), e.L}
			ends[k] = max(ends[k], e.Ret)
		}
		if isLive(e.Name) {
			longest[e.Name] = max(longest[e.Name], e.TTL)
		}
	}
	for _, e := range h.Events {
		if !isLive(e.Name) || e.Owner == "" || (e.K != "grant" && e.K != "fail" && e.K != "cleanup") {
			continue
		}
		k := nameOwner{e.Name, e.Owner}
		from, end := e.Start, e.Ret
		switch {
		case e.K == "fail" && e.Class == "closed":
			closedAt[k] = max(closedAt[k], e.Ret)
		case e.K == "cleanup" && e.Class == "closed":
			gaveUp[k] = true
		}
		if e.K == "cleanup" {
			// Its call's owner may be another (the Client takes a new one after an undo), and
			// when it began is not told: from the start.
			from = 0
		}
		if e.K == "grant" {
			end = int64(math.MaxInt64) // a handle whose Done never closed: its worker never said
			if last, ok := ends[[2]int64{int64(e.W), e.L}]; ok {
				end = last
				// A Client closed while the handle was open releases it before Close returns.
				for _, c := range closes[e.W] {
					if c.From >= e.Start && c.From <= end {
						end = max(end, c.To)
					}
				}
			}
		}
		spans[k] = append(spans[k], interval{from, end})
		if !slices.Contains(workers[k], e.W) {
			workers[k] = append(workers[k], e.W)
		}
	}
	for _, p := range h.Events {
		if p.K != "probe" {
			continue
		}
		v.Probes++
		bound := longest[p.Name] + cleanupTimeout + liveSlack
		for _, holder := range p.Holders {
			k := nameOwner{p.Name, holder.Owner}
			if len(spans[k]) == 0 {
				v.Unnamed++
				continue
			}
			d := h.unexcused(spans[k], workers[k], p.Name, p.Start)
			bound := bound
			if at := closedAt[k]; at > 0 && at < p.Start && !gaveUp[k] && lastEnd(spans[k], p.Start) == at {
				bound = closedSlack // its last call released what it was granted
			}
			if d <= bound {
				v.Excused++
				continue
			}
			v.flag(chkHeldForNone, p.W, "%s: held by owner %.12s (token %d, workers %v) for %v with nothing to excuse it (the bound: %v)",
				p.Name, holder.Owner, holder.Tok, workers[k], d.Round(time.Millisecond), bound)
		}
	}
}

// lastEnd returns the latest end of spans that began before at.
func lastEnd(spans []interval, at int64) int64 {
	var end int64
	for _, s := range spans {
		if s.From <= at {
			end = max(end, s.To)
		}
	}
	return end
}

// unexcused returns how long before at nothing excused an owner's holding name: not its
// spans (handles believed valid, calls and clean-up under way); not a fault of a server or of
// a link of its workers, after which a request that was on its way may still land (the count
// starts again at the fault's end); and not the time one of its workers was stopped or stalled,
// when it could not undo or release (as checkers d and e, that time does not count). It returns
// 0 when a span covers at, or only later events name the owner (its call was on its way).
func (h *nemesisHistory) unexcused(spans []interval, workers []int, name string, at int64) time.Duration {
	named, since := false, int64(0)
	for _, s := range spans {
		if s.From > at {
			continue // a later call of a reused owner
		}
		if s.To >= at {
			return 0
		}
		named, since = true, max(since, s.To)
	}
	if !named {
		return 0
	}
	for _, f := range h.Faults {
		if strings.HasPrefix(f.Kind, "pause-worker") {
			continue // counted below, with the stalls
		}
		if (slices.Contains(workers, f.Worker) || f.Worker < 0 && (f.Name == "" || f.Name == name)) && f.To >= since && f.From <= at {
			since = max(since, f.To)
		}
	}
	if since >= at {
		return 0
	}
	var stopped time.Duration
	for _, w := range workers {
		stopped = max(stopped, h.paused(w, since, at))
	}
	return max(time.Duration(at-since)-stopped, 0)
}

func isLive(name string) bool {
	return strings.HasPrefix(name, livePrefix) || strings.HasPrefix(name, liveSemPrefix)
}

// (l) A call with valid arguments never fails with ErrInvalid: that error tells its caller to
// fix its code, and a call that could succeed later (a server out of memory, a failover) must
// say so (ErrUnavailable). The calls the workers make invalid on purpose say so (Bad); a
// Refresh may be refused for the renewal interval or the lock delay of a hold that another call
// of a shared owner made, which its worker cannot know.
func (h *nemesisHistory) checkInvalid(v *nemesisVerdict) {
	for _, e := range h.Events {
		if e.Class != "invalid" || e.Bad || (e.K != "grant" && e.K != "fail" && e.K != "call") {
			continue
		}
		if e.Op == "refresh" && (strings.Contains(e.Err, "renewal interval") || strings.Contains(e.Err, "lock delay")) {
			continue
		}
		v.flag(chkInvalid, e.W, "%s: worker %d's %s (TTL %v) failed as invalid: %s", e.Name, e.W, e.Op, e.TTL, e.Err)
	}
}
