package safety

import (
	"strings"
	"time"
)

// The checkers of the lease policy a lock thread draws (drawLease). Each looks at the handle
// that made a hold (a first grant, not a re-entry): a re-entry keeps the cap and the delay of
// the hold it entered, and its own minimum only extends the hold's.
const (
	chkCap   = "m: validity past the cap (WithMaxHold)"
	chkFloor = "n: name taken within a released lock's minimum (WithMinHold)"
	chkDelay = "o: name taken within a lost lock's delay (WithLockDelay)"
)

// checkLease runs the three checkers:
//
// (m) A lock of a cap is never trusted past it: no validity its handle reported (at the grant,
// a Refresh, its Done) passes the grant's return plus the cap.
//
// (n) A lock released, with success, before its minimum ended keeps its name from every other
// owner until the minimum, counted from the call's start, unless a fault may have removed it
// from the store, or, on a store whose locks live with the Client's session (etcd, ZooKeeper:
// the Client keeps the lock until then), a fault touched its worker or the servers meanwhile.
//
// (o) A lock of a delay lost without a release keeps its name from every other owner until
// the delay after its last validity deadline, or until its holder's Release after the loss
// began (which frees it at once), unless a fault may have removed it from the store.
func (h *nemesisHistory) checkLease(v *nemesisVerdict) {
	type handle [2]int64
	events := map[handle][]nemEvent{} // every event of a handle, in order
	grants := map[string][]nemEvent{} // per name
	for _, e := range h.Events {
		if e.L != 0 {
			k := handle{int64(e.W), e.L}
			events[k] = append(events[k], e)
		}
		if e.K == "grant" {
			grants[e.Name] = append(grants[e.Name], e)
		}
	}
	// taken returns the first grant of name to another owner than g's that returned in
	// (from, to), if any.
	taken := func(g nemEvent, from, to int64) *nemEvent {
		for i, o := range grants[g.Name] {
			if o.Owner != g.Owner && o.Ret > from && o.Ret < to {
				return &grants[g.Name][i]
			}
		}
		return nil
	}
	for _, g := range h.Events {
		if g.K != "grant" || g.Op == "reenter" || g.Count != 1 || g.MaxHold+g.MinHold+g.Delay == 0 {
			continue
		}
		v.Capped += min(int(g.MaxHold), 1)
		v.Floored += min(int(g.MinHold), 1)
		v.Delayed += min(int(g.Delay), 1)
		var release, done *nemEvent
		for i, e := range events[handle{int64(g.W), g.L}] {
			if g.MaxHold > 0 && e.Valid > g.Ret+int64(g.MaxHold+time.Millisecond) {
				v.flag(chkCap, g.W, "%s: worker %d's lock (token %d) of cap %v trusted %v past it (%s event)",
					g.Name, g.W, g.Tok, g.MaxHold, time.Duration(e.Valid-g.Ret-int64(g.MaxHold)), e.K)
			}
			switch {
			case e.K == "call" && e.Op == "release" && release == nil:
				release = &events[handle{int64(g.W), g.L}][i]
			case e.K == "done":
				done = &events[handle{int64(g.W), g.L}][i]
			}
		}
		// A hold of an owner other processes share is kept by their holds too, and may be
		// released by them: its name is theirs as much as g's.
		if strings.HasPrefix(g.Owner, "group-") {
			continue
		}
		if floor := g.Start + int64(g.MinHold); g.MinHold > 0 && release != nil && release.Class == "ok" && release.Start < floor &&
			(done == nil || !done.Lost || done.Ret >= release.Start) {
			v.EarlyReleases++
			excused := h.lostAny(g.Name, g.Start, floor) ||
				(h.Backend == "etcd" || h.Backend == "zk") && h.touched(g.W, g.Name, g.Start, floor)
			if o := taken(g, g.Ret, floor-int64(time.Millisecond)); o != nil && !excused {
				v.flag(chkFloor, o.W, "%s: worker %d's grant (token %d) %v after worker %d's lock (token %d) of minimum %v was released, %v before the minimum's end",
					g.Name, o.W, o.Tok, time.Duration(o.Ret-release.Start), g.W, g.Tok, g.MinHold, time.Duration(floor-o.Ret))
			}
		}
		if g.Delay > 0 && done != nil && done.Lost && (release == nil || release.Start > done.Ret) {
			v.DelayedLosses++
			until := done.Valid + int64(g.Delay)
			if release != nil {
				// Its holder's Release after the loss frees the name at once (WithLockDelay):
				// the delay is for a holder that does not know, and one that releases does.
				until = min(until, release.Start)
			}
			if o := taken(g, g.Ret, until-int64(time.Millisecond)); o != nil && !h.lostAny(g.Name, g.Start, o.Ret) {
				v.flag(chkDelay, o.W, "%s: worker %d's grant (token %d) %v after worker %d's lock (token %d) of delay %v was lost past its validity, %v before the delay's end",
					g.Name, o.W, o.Tok, time.Duration(o.Ret-done.Valid), g.W, g.Tok, g.Delay, time.Duration(until-o.Ret))
			}
		}
	}
}
