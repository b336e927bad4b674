package safety

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
)

// nemesisHistory is everything a nemesis run recorded.
type nemesisHistory struct {
	Backend string // redis, redlock, etcd, zk: which checkers apply
	Events  []nemEvent
	Writes  []storedWrite
	Faults  []faultRecord
	Pauses  map[int][]interval // per worker: its SIGSTOPs, each extended by pauseGrace; check adds its stalls
	NoTTL   []string           // Redis keys seen without a TTL
	Exits   []string           // workers that failed or had to be killed
	// Upstream: workers ended by the race detector for go-zookeeper's own race alone
	// (upstreamZKRace), which docs/SAFETY.md names; reported, not a finding
	Upstream []string
}

// faultRecord is one fault as the nemesis carried it out.
type faultRecord struct {
	Kind     string
	From, To int64 // Unix ns
	Worker   int   // the worker it was about, or -1
	Server   int   // the server it was about, or -1
	Name     string
	DataLoss bool // it may have removed a lock from the store: a key deleted, a server restarted empty
}

type interval struct{ From, To int64 }

// checker names, as the report and docs/SAFETY.md give them.
const (
	chkStale    = "a: fenced store accepted a stale token"
	chkOrder    = "b: token not above an earlier grant to another owner"
	chkOverlap  = "c: believed-valid overlap"
	chkDone     = "d: Done closed late"
	chkCall     = "e: call outlived its deadline"
	chkNoTTL    = "f: key without a TTL"
	chkLeak     = "f: goroutine left in a worker"
	chkSpurious = "g: lock lost with no fault near it"
	// chkReentryAnew is a loss of chkSpurious's kind that docs/SAFETY.md names as open: a
	// Redlock re-entry whose nodes did not agree on the lock's token in time (one slow or
	// failing) takes a token round, and the new token ends the owner's lock in the Client. It
	// fails the long suite; the short one reports it.
	chkReentryAnew = "g: Redlock re-entry made the owner's lock anew (open, docs/SAFETY.md)"
	chkValidity    = "h: validity shorter than the contract's"
	chkPermits     = "i: more permits believed valid than the limit, or a writer beside another holder"
	chkLimits      = "j: permits of two limits believed valid at once"
	chkHeldForNone = "k: name held for no one"
	chkInvalid     = "l: a valid call failed as invalid"
	chkExit        = "worker failed"
)

// nemesisVerdict is what the checkers found.
type nemesisVerdict struct {
	Found   map[string]int      // per checker, the findings (0 for a clean run)
	Samples map[string][]string // per checker, the first few, described
	Workers map[string][]int    // per checker, the workers whose events it flagged
	Named   int                 // believed-valid overlaps that docs/SAFETY.md names (after a data loss), within bound

	Grants, Writes, Refused, Calls, Lost, Faults int
	Permits                                      int           // grants of permits and read-write locks (the permit thread's)
	Terms                                        int           // grants of leaderships (the election thread's)
	Stalls                                       int           // stretches a worker process ran nothing (watchStalls), outside its SIGSTOPs
	LongestStall                                 time.Duration // the longest of them, outside its SIGSTOPs
	Closes                                       int           // Clients closed by their worker while it held (reopen)
	Probes                                       int           // live names found held by a probe, and Inspect said by whom
	Excused                                      int           // of their holders, those something in the history excused (checker k)
	Unnamed                                      int           // and those whose owner no event named
	// Capped, Floored and Delayed count the first grants of a cap, a minimum and a lock delay.
	Capped, Floored, Delayed int
	// EarlyReleases and DelayedLosses count the holds checkers n and o looked at: released
	// before their minimum, lost under a delay.
	EarlyReleases, DelayedLosses int
}

func (v *nemesisVerdict) flag(checker string, worker int, format string, args ...any) {
	v.Found[checker]++
	if len(v.Samples[checker]) < 5 {
		v.Samples[checker] = append(v.Samples[checker], fmt.Sprintf(format, args...))
	}
	if !slices.Contains(v.Workers[checker], worker) {
		v.Workers[checker] = append(v.Workers[checker], worker)
	}
}

// failures returns the checkers that found something, in order, with their count; with open
// false, not the findings docs/SAFETY.md names as open (chkReentryAnew).
func (v *nemesisVerdict) failures(open bool) []string {
	var out []string
	for _, k := range slices.Sorted(mapKeys(v.Found)) {
		if k == chkReentryAnew && !open {
			continue
		}
		if n := v.Found[k]; n > 0 {
			out = append(out, fmt.Sprintf("%s: %d (e.g. %s)", k, n, strings.Join(v.Samples[k], "; ")))
		}
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// check runs every checker over h.
func (h *nemesisHistory) check() *nemesisVerdict {
	v := &nemesisVerdict{Found: map[string]int{}, Samples: map[string][]string{}, Workers: map[string][]int{}, Faults: len(h.Faults)}
	for _, c := range []string{chkStale, chkOrder, chkOverlap, chkDone, chkCall, chkNoTTL, chkLeak, chkSpurious, chkReentryAnew, chkHeldForNone, chkInvalid, chkCap, chkFloor, chkDelay, chkExit} {
		v.Found[c] = 0
	}
	if h.Backend == "redis" || h.Backend == "redlock" {
		v.Found[chkValidity] = 0
	}
	if h.Backend == "redis" || h.Backend == "etcd" || h.Backend == "zk" {
		v.Found[chkPermits], v.Found[chkLimits] = 0, 0
	}
	h.addStalls(v)
	h.checkStore(v)
	grants := h.grantsByName()
	h.checkOrder(v, grants)
	h.checkOverlap(v, grants)
	h.checkTimes(v)
	h.checkSpurious(v)
	h.checkPermits(v)
	h.checkHeldForNone(v)
	h.checkInvalid(v)
	h.checkLease(v)
	for _, k := range h.NoTTL {
		v.flag(chkNoTTL, -1, "%s", k)
	}
	for _, e := range h.Events {
		if e.K == "leak" {
			v.flag(chkLeak, e.W, "worker %d: %s", e.W, e.Err)
		}
	}
	for _, x := range h.Exits {
		v.flag(chkExit, -1, "%s", x)
	}
	return v
}

// (a) In the order the store decided them, no accepted write carries a token below one it
// accepted before, nor the same token from another owner.
func (h *nemesisHistory) checkStore(v *nemesisVerdict) {
	type top struct {
		tok   int64
		owner string
	}
	newest := map[string]top{}
	for _, w := range h.Writes {
		v.Writes++
		if !w.Accepted {
			v.Refused++
			continue
		}
		n := newest[w.Name]
		switch {
		case w.Token < n.tok:
			v.flag(chkStale, w.Worker, "%s: worker %d's token %d accepted after %d", w.Name, w.Worker, w.Token, n.tok)
		case w.Token == n.tok && w.Owner != n.owner:
			v.flag(chkStale, w.Worker, "%s: token %d accepted from two owners", w.Name, w.Token)
		}
		if w.Token >= n.tok {
			newest[w.Name] = top{w.Token, w.Owner}
		}
	}
}

func (h *nemesisHistory) grantsByName() map[string][]nemEvent {
	out := map[string][]nemEvent{}
	for _, e := range h.Events {
		if e.K == "grant" {
			out[e.Name] = append(out[e.Name], e)
		}
	}
	for _, g := range out {
		slices.SortFunc(g, func(a, b nemEvent) int { return cmp.Compare(a.Ret, b.Ret) })
	}
	return out
}

// (b) A grant whose call began after another owner's grant had returned was made after it,
// and so carries a greater token. A permit's grant that entered its owner's permit once more
// (a hold count above 1) carries that permit's token, older than the other owners' permits
// granted meanwhile.
func (h *nemesisHistory) checkOrder(v *nemesisVerdict, grants map[string][]nemEvent) {
	for name, gs := range grants {
		v.Grants += len(gs)
		if strings.HasPrefix(name, electPrefix) {
			v.Terms += len(gs)
		}
		for _, g := range gs {
			if isPermit(name) && g.Count > 1 {
				continue
			}
			var worst *nemEvent
			for i := range gs {
				if gs[i].Ret >= g.Start {
					break
				}
				if e := &gs[i]; e.Owner != g.Owner && e.Tok >= g.Tok && (worst == nil || e.Tok > worst.Tok) {
					worst = e
				}
			}
			if worst != nil {
				v.flag(chkOrder, g.W, "%s: worker %d's %s grant %d (owner %.8s) after worker %d's %d (owner %.8s) returned %v before it began",
					name, g.W, g.Op, g.Tok, g.Owner, worst.W, worst.Tok, worst.Owner, time.Duration(g.Start-worst.Ret))
			}
		}
	}
}

// lockKey names one lock in the store: an owner's acquisition, and the handles that re-entered
// it.
type lockKey struct {
	owner string
	tok   int64
}

// lockSpans returns, per lock, when its first grant's call began, and its longest and shortest
// TTL over its grants and refreshes. The shortest counts a Refresh without an answer too: it
// may have been applied, and the Client then trusts the lock no longer than that TTL.
func (h *nemesisHistory) lockSpans() (first map[lockKey]int64, longest, shortest map[lockKey]time.Duration) {
	first, longest, shortest = map[lockKey]int64{}, map[lockKey]time.Duration{}, map[lockKey]time.Duration{}
	for _, e := range h.Events {
		if e.K == "call" && e.Op == "refresh" && e.Class != "ok" && e.Class != "invalid" && e.Class != "notheld" {
			k := lockKey{e.Owner, e.Tok}
			if s, ok := shortest[k]; !ok || e.TTL < s {
				shortest[k] = e.TTL
			}
			continue
		}
		if e.K != "grant" && !(e.K == "call" && e.Op == "refresh" && e.Class == "ok") {
			continue
		}
		k := lockKey{e.Owner, e.Tok}
		if s, ok := first[k]; e.K == "grant" && (!ok || e.Start < s) {
			first[k] = e.Start
		}
		longest[k] = max(longest[k], e.TTL)
		if s, ok := shortest[k]; !ok || e.TTL < s {
			shortest[k] = e.TTL
		}
	}
	return first, longest, shortest
}

// (c) A write whose Valid() check began after another owner's later grant (a greater token)
// had returned was made while both believed they held the lock. docs/SAFETY.md names one cause:
// the store lost the lock (a key deleted, a server restarted without persistence) and the
// holder learns it at its next renewal, within its TTL.
func (h *nemesisHistory) checkOverlap(v *nemesisVerdict, grants map[string][]nemEvent) {
	first, longest, _ := h.lockSpans()
	for _, w := range h.Events {
		if w.K != "write" {
			continue
		}
		var later *nemEvent
		for i := range grants[w.Name] {
			g := &grants[w.Name][i]
			if g.Ret >= w.Start {
				break
			}
			if g.Owner != w.Owner && g.Tok > w.Tok {
				later = g
				break
			}
		}
		if later == nil {
			continue
		}
		k := lockKey{w.Owner, w.Tok}
		if h.lostData(w.Name, first[k], later.Ret, w.Start, longest[k]) {
			v.Named++
			continue
		}
		v.flag(chkOverlap, w.W, "%s: worker %d wrote with token %d, valid, %v after worker %d's grant %d returned",
			w.Name, w.W, w.Tok, time.Duration(w.Start-later.Ret), later.W, later.Tok)
	}
}

// lostData reports whether the store may have lost name's lock between from and to, no longer
// than ttl before at.
func (h *nemesisHistory) lostData(name string, from, to, at int64, ttl time.Duration) bool {
	for _, f := range h.Faults {
		if f.DataLoss && (f.Name == "" || f.Name == name) && f.To >= from && f.From <= to && at-f.From <= int64(ttl+CallSlack) {
			return true
		}
	}
	return false
}

// lostAny reports whether a fault that may have removed name from the store overlapped
// [from, to].
func (h *nemesisHistory) lostAny(name string, from, to int64) bool {
	for _, f := range h.Faults {
		if f.DataLoss && (f.Name == "" || f.Name == name) && f.To >= from && f.From <= to {
			return true
		}
	}
	return false
}

// addStalls adds each worker's stalls (watchStalls) to its pauses, as one union of intervals so
// that a stall within a SIGSTOP counts once.
func (h *nemesisHistory) addStalls(v *nemesisVerdict) {
	stalls := map[int][]interval{}
	for _, e := range h.Events {
		if e.K != "stall" {
			continue
		}
		stalls[e.W] = append(stalls[e.W], interval{e.Start, e.Ret})
		// A SIGSTOP of the worker shows as a stall too: the verdict counts what lies outside.
		if out := time.Duration(e.Ret-e.Start) - h.paused(e.W, e.Start, e.Ret); out > 0 {
			v.Stalls++
			v.LongestStall = max(v.LongestStall, out)
		}
	}
	if len(stalls) == 0 {
		return
	}
	merged := map[int][]interval{}
	for w, p := range h.Pauses {
		merged[w] = union(p, nil)
	}
	for w, st := range stalls {
		merged[w] = union(merged[w], st)
	}
	h.Pauses = merged
}

// union returns the union of the intervals of a and b, sorted and disjoint.
func union(a, b []interval) []interval {
	all := slices.Concat(a, b)
	slices.SortFunc(all, func(x, y interval) int { return cmp.Compare(x.From, y.From) })
	var out []interval
	for _, iv := range all {
		if n := len(out); n > 0 && iv.From <= out[n-1].To {
			out[n-1].To = max(out[n-1].To, iv.To)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// paused returns how long worker w was stopped within [from, to].
func (h *nemesisHistory) paused(w int, from, to int64) time.Duration {
	var d int64
	for _, p := range h.Pauses[w] {
		if lo, hi := max(p.From, from), min(p.To, to); hi > lo {
			d += hi - lo
		}
	}
	return time.Duration(d)
}

// (d) Done closes within DoneSlack of the validity deadline, and (e) every call returns within
// CallSlack of its context's deadline, not counting the time the worker was stopped. (h) A
// first grant made by one request on Redis or Redlock is trusted for its TTL less the drift
// allowance from that request's send, so at least that long from the call's start. A grant
// whose hold another call of its owner entered too (a burst) is left out: its validity is read
// after the call returned, by when a sibling may have refreshed the shared hold to a shorter
// TTL (seed 550345610 on redis: a TryObtain of TTL 6m read back as trusted for 2s).
func (h *nemesisHistory) checkTimes(v *nemesisVerdict) {
	shared := map[lockKey]int{}
	for _, e := range h.Events {
		if e.K == "grant" {
			shared[lockKey{e.Owner, e.Tok}]++
		}
	}
	for _, e := range h.Events {
		switch e.K {
		case "done":
			if e.Valid > 0 && e.Ret > e.Valid {
				if late := time.Duration(e.Ret-e.Valid) - h.paused(e.W, e.Valid, e.Ret); late > DoneSlack {
					v.flag(chkDone, e.W, "%s: worker %d's Done closed %v after the validity deadline (%s)", e.Name, e.W, late, e.Err)
				}
			}
			if e.Lost {
				v.Lost++
			}
		case "grant", "fail", "call":
			v.Calls++
			if e.Dl > 0 {
				// From the deadline on when it passed before the call began: the worker was
				// stopped between making the context and the call.
				if over := time.Duration(e.Ret-e.Dl) - h.paused(e.W, min(e.Start, e.Dl), e.Ret); over > CallSlack {
					v.flag(chkCall, e.W, "%s: worker %d's %s returned %v after its deadline (%s %s)", e.Name, e.W, e.Op, over, e.Class, e.Err)
				}
			}
		}
		// A queued Redis grant may be a hand-over, trusted for less by design: on Redis only a
		// TryObtain's grant is made by one request.
		if e.K == "grant" && e.Count == 1 && e.Op != "reenter" && shared[lockKey{e.Owner, e.Tok}] == 1 && (h.Backend == "redlock" || h.Backend == "redis" && e.Op == "try") {
			// A lock delay is kept by the store beyond the TTL, and the drift allowance counts
			// on both; a cap ends the validity from the grant's arrival, after the start.
			want := e.Start + int64(e.TTL-drift(e.TTL+e.Delay)-time.Millisecond)
			if e.MaxHold > 0 {
				want = min(want, e.Start+int64(e.MaxHold-time.Millisecond))
			}
			if e.Valid < want {
				v.flag(chkValidity, e.W, "%s: worker %d's grant with TTL %v trusted %v less than TTL − drift from the call's start",
					e.Name, e.W, e.TTL, time.Duration(want-e.Valid)+time.Millisecond)
			}
		}
	}
}

// drift is the Client's allowance for clock-rate differences (options.go).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// (g) A lock is not ended by a grant of its own owner and token (the store still held it),
// and a lock of a long TTL is lost only when a fault touched it: a stop or a link fault of its
// worker, a server fault, or its key deleted, from a second before it was obtained on. A lock
// nothing renews (its first grant had the watchdog off) and that was held past its validity
// deadline is lost by design.
func (h *nemesisHistory) checkSpurious(v *nemesisVerdict) {
	grantOf := map[[2]int64]nemEvent{}
	type heldBy struct {
		w     int
		owner string
		tok   int64
	}
	firstOf := map[heldBy]nemEvent{}
	for _, e := range h.Events {
		if e.K == "grant" {
			grantOf[[2]int64{int64(e.W), e.L}] = e
			k := heldBy{e.W, e.Owner, e.Tok}
			if f, ok := firstOf[k]; !ok || e.Ret < f.Ret {
				firstOf[k] = e
			}
		}
	}
	_, _, shortest := h.lockSpans()
	for _, e := range h.Events {
		if e.K != "done" || !e.Lost {
			continue
		}
		g, ok := grantOf[[2]int64{int64(e.W), e.L}]
		if !ok {
			continue
		}
		// Lost before its deadline, the store said it no longer had the lock.
		if again := h.regranted(e); again != nil && e.Ret < e.Valid && !h.lostData(g.Name, again.Start, e.Ret, e.Ret, time.Hour) {
			v.flag(chkSpurious, e.W, "%s: worker %d's lock (token %d) lost (%s) by its own worker's grant of the same owner and token %v later: the store still held it",
				g.Name, e.W, g.Tok, e.Err, time.Duration(again.Ret-e.Ret))
			continue
		}
		if shortest[lockKey{g.Owner, g.Tok}] < spuriousMinTTL || strings.Contains(e.Err, strings.TrimPrefix(fencelock.ErrMaxHold.Error(), "fencelock: ")) {
			continue // too short to tell, or ended at its cap (checker m)
		}
		if firstOf[heldBy{e.W, g.Owner, g.Tok}].NoWatchdog && e.Ret >= e.Valid {
			continue
		}
		if !h.touched(e.W, g.Name, g.Start-int64(time.Second), e.Ret) {
			chk := chkSpurious
			if h.Backend == "redlock" && strings.Contains(e.Err, "to this owner anew") {
				chk = chkReentryAnew
			}
			v.flag(chk, e.W, "%s: worker %d's lock (TTL %v, token %d) lost %v after its grant: %s; %s",
				g.Name, e.W, g.TTL, g.Tok, time.Duration(e.Ret-g.Ret), e.Err, h.renewals(g, e.Ret))
		}
	}
}

// (i) At no instant do holders believe more permits of a semaphore valid than its limit, nor
// a writer of a read-write lock valid beside another holder, but after a data loss: a holder
// believes from its grant's return until its Done closed, its validity deadline passed, it
// called Release or its worker closed the Client, whichever came first (a Done closed by a
// Release or a Close is reported when its watcher runs, after the grant that the release
// let in may have returned). Permits are counted per owner: the handles of one owner (goroutines of
// one process, or processes that share an owner ID) are one permit, of the greatest weight
// among them. (j) Nor do holders believe permits asked for with two limits valid at once: the
// limit is the one the holders agreed on, and a caller that disagrees is refused; the count is
// held to the smallest limit among the holders.
func (h *nemesisHistory) checkPermits(v *nemesisVerdict) {
	done := map[[2]int64]nemEvent{}
	released := map[[2]int64]int64{}
	closes := map[int][]int64{}
	for _, e := range h.Events {
		switch {
		case e.K == "done":
			done[[2]int64{int64(e.W), e.L}] = e
		case e.K == "call" && e.Op == "release":
			released[[2]int64{int64(e.W), e.L}] = e.Start
		case e.K == "close":
			closes[e.W] = append(closes[e.W], e.Start)
		}
	}
	type edge struct {
		at    int64
		delta int
		g     nemEvent
	}
	edges := map[string][]edge{}
	for _, g := range h.Events {
		if g.K != "grant" || !isPermit(g.Name) {
			continue
		}
		v.Permits++
		end := g.Valid
		if d, ok := done[[2]int64{int64(g.W), g.L}]; ok {
			end = min(d.Ret, d.Valid)
		}
		if r, ok := released[[2]int64{int64(g.W), g.L}]; ok {
			end = min(end, r)
		}
		for _, c := range closes[g.W] {
			if c >= g.Ret {
				end = min(end, c)
			}
		}
		if end <= g.Ret {
			continue
		}
		edges[g.Name] = append(edges[g.Name], edge{g.Ret, 1, g}, edge{end, -1, g})
	}
	for name, es := range edges {
		slices.SortFunc(es, func(a, b edge) int {
			if c := cmp.Compare(a.at, b.at); c != 0 {
				return c
			}
			return a.delta - b.delta // an end before a start at the same instant
		})
		active := map[string]map[[2]int64]nemEvent{} // owner → its handles believed valid
		for _, e := range es {
			k, owner := [2]int64{int64(e.g.W), e.g.L}, e.g.Owner
			if e.delta < 0 {
				delete(active[owner], k)
				if len(active[owner]) == 0 {
					delete(active, owner)
				}
				continue
			}
			if active[owner] == nil {
				active[owner] = map[[2]int64]nemEvent{}
			}
			active[owner][k] = e.g
			used, limits := permitsInUse(active)
			limit := slices.Min(limits)
			if used <= limit && len(limits) == 1 {
				continue
			}
			// A store that lost data since the first of these was granted may have forgotten it.
			first := e.at
			for _, hs := range active {
				for _, g := range hs {
					first = min(first, g.Start)
				}
			}
			if h.lostAny(name, first, e.at) {
				continue
			}
			if len(limits) > 1 {
				v.flag(chkLimits, e.g.W, "%s: worker %d's grant of limit %d (token %d) made permits of limits %v believed valid at once by %d owners",
					name, e.g.W, permitLimitOf(e.g), e.g.Tok, limits, len(active))
			}
			if used > limit {
				v.flag(chkPermits, e.g.W, "%s: worker %d's grant of %d (token %d) made %d permits believed valid at once by %d owners, of %d",
					name, e.g.W, max(e.g.Weight, 1), e.g.Tok, used, len(active), limit)
			}
		}
	}
}

func isPermit(name string) bool {
	return strings.HasPrefix(name, permitPrefix) || strings.HasPrefix(name, rwPrefix) || strings.HasPrefix(name, liveSemPrefix)
}

// permitLimitOf is the limit g asked for: its own for a semaphore's permit (permitLimit when
// it does not say), fencelock.RWReaders for a read-write lock's.
func permitLimitOf(g nemEvent) int {
	switch {
	case strings.HasPrefix(g.Name, rwPrefix):
		return fencelock.RWReaders
	case g.Limit > 0:
		return g.Limit
	}
	return permitLimit
}

// permitsInUse returns the permits the owners in active take, each owner once with the
// greatest weight among its handles, and the limits their handles asked for, sorted.
func permitsInUse(active map[string]map[[2]int64]nemEvent) (used int, limits []int) {
	for _, hs := range active {
		w := 0
		for _, g := range hs {
			w = max(w, g.Weight, 1)
			if l := permitLimitOf(g); !slices.Contains(limits, l) {
				limits = append(limits, l)
			}
		}
		used += w
	}
	slices.Sort(limits)
	return used, limits
}

// renewals describes the watchdog's renewals of g's lock up to its loss at lost, timed from
// the grant's return.
func (h *nemesisHistory) renewals(g nemEvent, lost int64) string {
	var b strings.Builder
	for _, e := range h.Events {
		if e.K != "renew" || e.W != g.W || e.Name != g.Name || e.Tok != g.Tok || e.Ret < g.Start || e.Start > lost {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "sent at %v took %v", time.Duration(e.Start-g.Ret).Round(time.Millisecond), time.Duration(e.Ret-e.Start).Round(time.Millisecond))
		if e.Err != "" {
			fmt.Fprintf(&b, " (%s)", e.Err)
		}
	}
	if b.Len() == 0 {
		return "no renewal came back"
	}
	return "renewals " + b.String()
}

// regranted returns a grant of the lost lock's owner and token to the same worker that was in
// flight when the loss was seen: the store still held the lock then, under that very token,
// so the Client had no cause to end it.
func (h *nemesisHistory) regranted(lost nemEvent) *nemEvent {
	for i, g := range h.Events {
		if g.K == "grant" && g.W == lost.W && g.L != lost.L && g.Owner == lost.Owner && g.Tok == lost.Tok && g.Start <= lost.Ret && g.Ret >= lost.Ret-int64(time.Millisecond) {
			return &h.Events[i]
		}
	}
	return nil
}

func (h *nemesisHistory) touched(worker int, name string, from, to int64) bool {
	for _, f := range h.Faults {
		if f.To < from || f.From > to {
			continue
		}
		switch {
		case f.Worker == worker, f.Name == name, f.Worker < 0 && f.Name == "":
			return true
		}
	}
	return false
}
