package safety

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Each checker fires on a history made by hand to break it, and stays quiet on its clean twin.
func TestNemesisCheckersOnHistories(t *testing.T) {
	ms := func(n int) int64 { return int64(n) * int64(time.Millisecond) }
	grant := func(w int, owner string, tok int64, start, ret int) nemEvent {
		return nemEvent{W: w, K: "grant", Op: "obtain", L: tok, Name: "x", Owner: owner, Tok: tok, Count: 1, TTL: time.Second, Start: ms(start), Ret: ms(ret), Valid: ms(ret + 900)}
	}
	write := func(w int, owner string, tok int64, at int) nemEvent {
		return nemEvent{W: w, K: "write", L: tok, Name: "x", Owner: owner, Tok: tok, Start: ms(at), Ret: ms(at + 1)}
	}
	stored := func(w int, owner string, tok int64, ok bool) storedWrite {
		return storedWrite{nemWrite: nemWrite{Name: "x", Owner: owner, Worker: w, Token: tok}, Accepted: ok}
	}
	done := func(w int, tok int64, at, valid int, lost bool) nemEvent {
		return nemEvent{W: w, K: "done", L: tok, Name: "x", Owner: "a", Tok: tok, Ret: ms(at), Valid: ms(valid), Lost: lost}
	}
	// permit is a permit's grant and its Done, which closed at end.
	permit := func(w int, tok int64, start, ret, end int) nemEvent {
		return nemEvent{W: w, K: "grant", Op: "permit", L: tok, Name: permitPrefix + "x", Owner: "o" + string(rune('a'+tok)), Tok: tok, Count: 1, TTL: time.Second, Start: ms(start), Ret: ms(ret), Valid: ms(end)}
	}
	rw := func(w int, tok int64, start, ret, end, weight int) nemEvent {
		e := permit(w, tok, start, ret, end)
		e.Name, e.Weight = rwPrefix+"x", weight
		return e
	}
	// owned is a permit's grant under a given owner and limit.
	owned := func(w int, l int64, owner string, limit, start, ret, end int) nemEvent {
		e := permit(w, l, start, ret, end)
		e.Owner, e.Limit = owner, limit
		return e
	}
	// live is a call on a live name; probe finds it held by owner at `at`.
	live := func(w int, k, owner string, start, ret int) nemEvent {
		return nemEvent{W: w, K: k, Op: "live", L: 0, Name: livePrefix + "x", Owner: owner, TTL: time.Second, Start: ms(start), Ret: ms(ret), Class: "ctx"}
	}
	// closedFail is a call on a live name that failed at ret as its Client closed.
	closedFail := func(w int, owner string, ret int) nemEvent {
		e := live(w, "fail", owner, 0, ret)
		e.Class = "closed"
		return e
	}
	probe := func(w int, owner string, at int) nemEvent {
		return nemEvent{W: w, K: "probe", Name: livePrefix + "x", Start: ms(at), Ret: ms(at + 2), Holders: []nemHolder{{Owner: owner, Tok: 7}}}
	}
	call := func(w int, start, ret, dl int) nemEvent {
		return nemEvent{W: w, K: "call", Op: "release", Name: "x", Start: ms(start), Ret: ms(ret), Dl: ms(dl)}
	}
	// capped is a lock of TTL 5 s and cap maxHold, granted at 10 ms.
	capped := func(w int, maxHold int) nemEvent {
		return nemEvent{W: w, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: 5 * time.Second, Start: 0, Ret: ms(10),
			Valid: ms(1000), MaxHold: time.Duration(maxHold) * time.Millisecond}
	}
	// floored is a lock of minimum 1 s released at 100 ms (the release's class given), then
	// another owner's grant returned at taken.
	floored := func(taken int, class string) []nemEvent {
		return []nemEvent{
			{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Second, Start: 0, Ret: ms(10), Valid: ms(980), MinHold: time.Second},
			{W: 0, K: "call", Op: "release", L: 1, Name: "x", Owner: "a", Tok: 1, Start: ms(100), Ret: ms(105), Class: class},
			{W: 1, K: "grant", Op: "obtain", L: 2, Name: "x", Owner: "b", Tok: 2, Count: 1, TTL: time.Second, Start: ms(50), Ret: ms(taken), Valid: ms(taken + 900)},
		}
	}
	// delayed is a lock of delay 1 s lost at its validity deadline (1 s), or released at 500 ms,
	// then another owner's grant returned at taken; lateRelease, when not 0, is when its holder
	// released it after the loss, which frees the name at once.
	delayed := func(taken int, released bool, lateRelease int) []nemEvent {
		es := []nemEvent{
			{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Second, Start: 0, Ret: ms(10), Valid: ms(980), Delay: time.Second},
			{W: 0, K: "done", L: 1, Name: "x", Owner: "a", Tok: 1, Ret: ms(1000), Valid: ms(1000), Lost: !released},
			{W: 0, K: "call", Op: "release", L: 1, Name: "x", Owner: "a", Tok: 1, Start: ms(500), Ret: ms(505), Class: "ok"},
		}
		switch {
		case lateRelease != 0:
			es[2].Start, es[2].Ret = ms(lateRelease), ms(lateRelease+5)
		case !released:
			es = es[:2]
		}
		return append(es, nemEvent{W: 1, K: "grant", Op: "obtain", L: 2, Name: "x", Owner: "b", Tok: 2, Count: 1, TTL: time.Second, Start: ms(50), Ret: ms(taken), Valid: ms(taken + 900)})
	}
	for _, tc := range []struct {
		checker    string
		bad, clean nemesisHistory
	}{
		{chkStale,
			nemesisHistory{Writes: []storedWrite{stored(0, "a", 5, true), stored(1, "b", 4, true)}},
			nemesisHistory{Writes: []storedWrite{stored(0, "a", 5, true), stored(1, "b", 4, false), stored(0, "a", 5, true)}}},
		{chkOrder,
			nemesisHistory{Events: []nemEvent{grant(0, "a", 5, 0, 10), grant(1, "b", 4, 20, 30)}},
			nemesisHistory{Events: []nemEvent{grant(0, "a", 5, 0, 10), grant(1, "b", 4, 5, 30), grant(0, "a", 5, 40, 50)}}},
		{chkOverlap,
			nemesisHistory{Events: []nemEvent{grant(0, "a", 4, 0, 10), grant(1, "b", 5, 20, 30), write(0, "a", 4, 40)}},
			nemesisHistory{Events: []nemEvent{grant(0, "a", 4, 0, 10), write(0, "a", 4, 25), grant(1, "b", 5, 20, 30)},
				Faults: []faultRecord{{Kind: "delete-key", From: ms(15), To: ms(16), Worker: -1, Name: "x", DataLoss: true}}}},
		{chkDone,
			nemesisHistory{Events: []nemEvent{done(0, 1, 1000, 800, true)}},
			nemesisHistory{Events: []nemEvent{done(0, 1, 1000, 800, true), done(0, 2, 500, 800, false)}, Pauses: map[int][]interval{0: {{ms(700), ms(990)}}}}},
		{chkCall,
			nemesisHistory{Events: []nemEvent{call(0, 0, 400, 200)}},
			nemesisHistory{Events: []nemEvent{call(0, 0, 400, 200)}, Pauses: map[int][]interval{0: {{ms(100), ms(250)}}}}},
		{chkCall, // a stall of the worker process counts like a pause, but once where they overlap
			nemesisHistory{Events: []nemEvent{call(0, 0, 400, 200), {W: 0, K: "stall", Start: ms(110), Ret: ms(170)}}, Pauses: map[int][]interval{0: {{ms(100), ms(160)}}}},
			nemesisHistory{Events: []nemEvent{call(0, 0, 400, 200), {W: 0, K: "stall", Start: ms(150), Ret: ms(210)}}, Pauses: map[int][]interval{0: {{ms(100), ms(160)}}}}},
		{chkCall, // a deadline that passed while the worker was stopped before the call began
			nemesisHistory{Events: []nemEvent{call(0, 500, 520, 200)}, Pauses: map[int][]interval{0: {{ms(480), ms(505)}}}},
			nemesisHistory{Events: []nemEvent{call(0, 500, 520, 200)}, Pauses: map[int][]interval{0: {{ms(150), ms(505)}}}}},
		{chkLeak,
			nemesisHistory{Events: []nemEvent{{W: 2, K: "leak", Err: "found unexpected goroutines"}}},
			nemesisHistory{}},
		{chkNoTTL, nemesisHistory{NoTTL: []string{"server 0: k"}}, nemesisHistory{}},
		{chkSpurious,
			nemesisHistory{Events: []nemEvent{{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 3 * time.Second, Start: 0, Ret: ms(5)}, done(0, 1, 900, 2900, true)}},
			nemesisHistory{Events: []nemEvent{{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 3 * time.Second, Start: 0, Ret: ms(5)}, done(0, 1, 900, 2900, true)},
				Faults: []faultRecord{{Kind: "cut", From: ms(500), To: ms(600), Worker: 0, Server: 0}}}},
		{chkSpurious, // ended by a grant of its own owner and token
			nemesisHistory{Events: []nemEvent{grant(0, "a", 1, 0, 5), {W: 0, K: "grant", Op: "burst", L: 2, Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Second, Start: ms(1), Ret: ms(6)}, done(0, 1, 6, 900, true)}},
			nemesisHistory{Events: []nemEvent{grant(0, "a", 1, 0, 5), {W: 0, K: "grant", Op: "burst", L: 2, Name: "x", Owner: "a", Tok: 2, Count: 1, TTL: time.Second, Start: ms(1), Ret: ms(6)}, done(0, 1, 6, 900, true)}}},
		{chkSpurious, // after a Refresh to 10 ms that got no answer, the Client trusts the lock 10 ms only
			nemesisHistory{Events: []nemEvent{{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 3 * time.Second, Start: 0, Ret: ms(5)},
				{W: 0, K: "call", Op: "refresh", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 10 * time.Millisecond, Start: ms(6), Ret: ms(9), Class: "invalid"}, done(0, 1, 900, 2900, true)}},
			nemesisHistory{Events: []nemEvent{{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 3 * time.Second, Start: 0, Ret: ms(5)},
				{W: 0, K: "call", Op: "refresh", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 10 * time.Millisecond, Start: ms(6), Ret: ms(9), Class: "unavailable"}, done(0, 1, 16, 16, true)}}},
		{chkReentryAnew, // the Client ended the lock because a re-entry's token round made a new one
			nemesisHistory{Backend: "redlock", Events: []nemEvent{{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 3 * time.Second, Start: 0, Ret: ms(5)},
				{W: 0, K: "done", L: 1, Name: "x", Owner: "a", Tok: 1, Ret: ms(30), Valid: ms(2900), Lost: true, Err: "fencelock: lock lost: the store granted \"x\" to this owner anew, with token 2"}}},
			nemesisHistory{Backend: "redlock", Events: []nemEvent{{W: 0, K: "grant", Op: "obtain", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 3 * time.Second, Start: 0, Ret: ms(5)},
				{W: 0, K: "done", L: 1, Name: "x", Owner: "a", Tok: 1, Ret: ms(30), Valid: ms(2900), Lost: true, Err: "fencelock: lock lost: the store granted \"x\" to this owner anew, with token 2"}},
				Faults: []faultRecord{{Kind: "cut", From: ms(10), To: ms(20), Worker: 0, Server: 0}}}},
		{chkPermits, // three permits of a semaphore of two believed valid at once
			nemesisHistory{Backend: "redis", Events: []nemEvent{permit(0, 1, 0, 10, 500), permit(1, 2, 5, 20, 500), permit(2, 3, 30, 40, 500)}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{permit(0, 1, 0, 10, 35), permit(1, 2, 5, 20, 500), permit(2, 3, 30, 40, 500),
				permit(0, 4, 100, 110, 500)}, Faults: []faultRecord{{Kind: "restart-server", From: ms(50), To: ms(60), Worker: -1, Server: 0, DataLoss: true}}}},
		{chkPermits, // a writer believed valid beside a reader
			nemesisHistory{Backend: "etcd", Events: []nemEvent{rw(0, 1, 0, 10, 500, 1), rw(1, 2, 5, 20, 500, 1), rw(2, 3, 30, 40, 600, fencelock.RWReaders)}},
			nemesisHistory{Backend: "etcd", Events: []nemEvent{rw(0, 1, 0, 10, 35, 1), rw(1, 2, 5, 20, 38, 1), rw(2, 3, 30, 40, 600, fencelock.RWReaders)}}},
		{chkOrder, // a permit's grant that entered its owner's permit again keeps that permit's older token
			nemesisHistory{Backend: "redis", Events: []nemEvent{owned(0, 5, "a", 2, 0, 10, 500), owned(1, 6, "b", 2, 20, 30, 500), owned(0, 5, "a", 2, 40, 50, 500)}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{owned(0, 5, "a", 2, 0, 10, 500), owned(1, 6, "b", 2, 20, 30, 500),
				func() nemEvent { e := owned(0, 5, "a", 2, 40, 50, 500); e.L, e.Count = 7, 2; return e }()}}},
		{chkPermits, // a holder believes no longer once it called Release, though its Done is reported later
			nemesisHistory{Backend: "redis", Events: []nemEvent{owned(0, 1, "a", 2, 0, 10, 500), owned(1, 2, "b", 2, 5, 20, 500), owned(2, 3, "c", 2, 30, 40, 500)}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{owned(0, 1, "a", 2, 0, 10, 500), owned(1, 2, "b", 2, 5, 20, 500), owned(2, 3, "c", 2, 30, 40, 500),
				{W: 0, K: "call", Op: "release", L: 1, Name: permitPrefix + "x", Start: ms(35), Ret: ms(45)}}}},
		{chkPermits, // nor once its worker closed the Client
			nemesisHistory{Backend: "zk", Events: []nemEvent{owned(0, 1, "a", 1, 0, 10, 500), owned(1, 2, "b", 1, 30, 40, 500)}},
			nemesisHistory{Backend: "zk", Events: []nemEvent{owned(0, 1, "a", 1, 0, 10, 500), owned(1, 2, "b", 1, 30, 40, 500),
				{W: 0, K: "close", Start: ms(35), Ret: ms(45)}}}},
		{chkPermits, // two handles of one owner are one permit: counted per handle, three of two
			nemesisHistory{Backend: "redis", Events: []nemEvent{owned(0, 1, "a", 2, 0, 10, 500), owned(0, 2, "b", 2, 5, 20, 500), owned(1, 3, "c", 2, 30, 40, 500)}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{owned(0, 1, "a", 2, 0, 10, 500), owned(0, 2, "a", 2, 5, 20, 500), owned(1, 3, "c", 2, 30, 40, 500)}}},
		{chkPermits, // the count is held to the smallest limit among the holders
			nemesisHistory{Backend: "etcd", Events: []nemEvent{owned(0, 1, "a", 3, 0, 10, 500), owned(1, 2, "b", 3, 5, 20, 500), owned(2, 3, "c", 2, 30, 40, 500)}},
			nemesisHistory{Backend: "etcd", Events: []nemEvent{owned(0, 1, "a", 3, 0, 10, 500), owned(1, 2, "b", 3, 5, 20, 500), owned(2, 3, "c", 3, 30, 40, 500)}}},
		{chkLimits, // permits of limits 2 and 3 believed valid at once
			nemesisHistory{Backend: "etcd", Events: []nemEvent{owned(0, 1, "a", 2, 0, 10, 500), owned(1, 2, "b", 3, 30, 40, 500)}},
			nemesisHistory{Backend: "etcd", Events: []nemEvent{owned(0, 1, "a", 2, 0, 10, 35), owned(1, 2, "b", 3, 30, 40, 500)}}},
		{chkHeldForNone, // held by a call's owner 5 s after the call returned, nothing near
			nemesisHistory{Backend: "etcd", Events: []nemEvent{live(0, "fail", "z", 0, 3), probe(1, "z", 5000)}},
			nemesisHistory{Backend: "etcd", Events: []nemEvent{live(0, "fail", "z", 0, 3), probe(1, "z", 5000), probe(1, "y", 5000), live(0, "fail", "z", 4990, 5010)},
				Pauses: map[int][]interval{0: {{ms(100), ms(200)}}}}},
		{chkHeldForNone, // the time the owner's worker was stopped does not count
			nemesisHistory{Backend: "etcd", Events: []nemEvent{live(0, "fail", "z", 0, 3), probe(1, "z", 9000)}, Pauses: map[int][]interval{0: {{ms(1000), ms(4000)}}}},
			nemesisHistory{Backend: "etcd", Events: []nemEvent{live(0, "fail", "z", 0, 3), probe(1, "z", 7000)}, Pauses: map[int][]interval{0: {{ms(1000), ms(4000)}}}}},
		{chkHeldForNone, // a server fault starts the count again at its end; another worker's link fault does not
			nemesisHistory{Backend: "zk", Events: []nemEvent{live(0, "fail", "z", 0, 3), probe(1, "z", 9000)},
				Faults: []faultRecord{{Kind: "pause-server", From: ms(1000), To: ms(4000), Worker: -1}, {Kind: "cut", From: ms(1000), To: ms(6000), Worker: 2}}},
			nemesisHistory{Backend: "zk", Events: []nemEvent{live(0, "fail", "z", 0, 3), probe(1, "z", 7000)},
				Faults: []faultRecord{{Kind: "pause-server", From: ms(1000), To: ms(4000), Worker: -1}}}},
		{chkHeldForNone, // a call that failed as its Client closed released its grant: held 1.6 s after it is not excused
			nemesisHistory{Backend: "redis", Events: []nemEvent{closedFail(0, "z", 100), probe(1, "z", 1700)}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{closedFail(0, "z", 100), probe(1, "z", 300), // within closedSlack
				closedFail(0, "y", 100), {W: 0, K: "cleanup", Name: livePrefix + "x", Owner: "y", Ret: ms(100), Class: "closed"}, probe(1, "y", 1700)}}},
		{chkHeldForNone, // a handle is excused until its last event, and a Close of its worker that it was open for
			nemesisHistory{Backend: "zk", Events: []nemEvent{{W: 0, K: "grant", Op: "live", L: 1, Name: livePrefix + "x", Owner: "h", Tok: 7, TTL: time.Second, Start: 0, Ret: ms(5)},
				{W: 0, K: "done", L: 1, Name: livePrefix + "x", Owner: "h", Tok: 7, Ret: ms(100)}, {W: 0, K: "close", Start: ms(100), Ret: ms(200)}, probe(1, "h", 5000)}},
			nemesisHistory{Backend: "zk", Events: []nemEvent{{W: 0, K: "grant", Op: "live", L: 1, Name: livePrefix + "x", Owner: "h", Tok: 7, TTL: time.Second, Start: 0, Ret: ms(5)},
				{W: 0, K: "done", L: 1, Name: livePrefix + "x", Owner: "h", Tok: 7, Ret: ms(100)}, {W: 0, K: "close", Start: ms(100), Ret: ms(2000)}, probe(1, "h", 5000)}}},
		{chkInvalid,
			nemesisHistory{Backend: "redis", Events: []nemEvent{{W: 0, K: "fail", Op: "try", Name: "x", TTL: time.Second, Class: "invalid", Err: "fencelock: invalid argument: Redis refused: OOM command not allowed"}}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{{W: 0, K: "fail", Op: "try", Name: "x", TTL: 9 * time.Millisecond, Class: "invalid", Bad: true},
				{W: 0, K: "fail", Op: "permit", Name: permitPrefix + "x", TTL: time.Second, Class: "limit"},
				{W: 0, K: "call", Op: "refresh", Name: "x", TTL: 25 * time.Millisecond, Class: "invalid", Err: "fencelock: invalid argument: renewal interval 5ms is too long for TTL 10ms"}}}},
		{chkValidity,
			nemesisHistory{Backend: "redlock", Events: []nemEvent{{W: 0, K: "grant", Op: "try", Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Second, Start: 0, Ret: ms(5), Valid: ms(975)}}},
			nemesisHistory{Backend: "redlock", Events: []nemEvent{{W: 0, K: "grant", Op: "try", Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Second, Start: 0, Ret: ms(5), Valid: ms(988)}}}},
		{chkValidity, // a short validity read back from a hold a sibling of the burst shares is not the grant's
			nemesisHistory{Backend: "redis", Events: []nemEvent{{W: 0, K: "grant", Op: "try", Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Minute, Start: 0, Ret: ms(5), Valid: ms(2000)}}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{{W: 0, K: "grant", Op: "try", Name: "x", Owner: "a", Tok: 1, Count: 1, TTL: time.Minute, Start: 0, Ret: ms(5), Valid: ms(2000)},
				{W: 0, K: "grant", Op: "try", Name: "x", Owner: "a", Tok: 1, Count: 2, TTL: time.Minute, Start: 0, Ret: ms(4), Valid: ms(2000)}}}},
		{chkCap, // a Refresh's validity past the cap; a cap loss is not a spurious one (g)
			nemesisHistory{Backend: "redis", Events: []nemEvent{capped(0, 1000),
				{W: 0, K: "call", Op: "refresh", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 5 * time.Second, Start: ms(500), Ret: ms(510), Valid: ms(1020), Class: "ok"}}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{capped(0, 1000),
				{W: 0, K: "call", Op: "refresh", L: 1, Name: "x", Owner: "a", Tok: 1, TTL: 5 * time.Second, Start: ms(500), Ret: ms(510), Valid: ms(1010), Class: "ok"},
				{W: 0, K: "done", L: 1, Name: "x", Owner: "a", Tok: 1, Ret: ms(1010), Valid: ms(1010), Lost: true, Err: fencelock.ErrMaxHold.Error()}}}},
		{chkSpurious, // a lock lost with no fault near it, but not one ended at its cap
			nemesisHistory{Backend: "redis", Events: []nemEvent{capped(0, 1000),
				{W: 0, K: "done", L: 1, Name: "x", Owner: "a", Tok: 1, Ret: ms(900), Valid: ms(1000), Lost: true, Err: "fencelock: lock lost: gone"}}},
			nemesisHistory{Backend: "redis", Events: []nemEvent{capped(0, 1000),
				{W: 0, K: "done", L: 1, Name: "x", Owner: "a", Tok: 1, Ret: ms(1010), Valid: ms(1010), Lost: true,
					Err: "fencelock: lock lost: held for the longest WithMaxHold allows: 1s after its grant"}}}}, // as a run reported it
		{chkFloor, // taken 400 ms into a 1 s minimum; or after it, or after a release that failed, or a key deleted
			nemesisHistory{Backend: "redis", Events: floored(400, "ok")},
			nemesisHistory{Backend: "redis", Events: floored(1001, "ok")}},
		{chkFloor,
			nemesisHistory{Backend: "redis", Events: floored(400, "ok")},
			nemesisHistory{Backend: "redis", Events: floored(400, "unavailable")}},
		{chkFloor,
			nemesisHistory{Backend: "etcd", Events: floored(400, "ok"), Faults: []faultRecord{{Kind: "delete-key", From: ms(2000), To: ms(2100), Worker: -1, Name: "x", DataLoss: true}}},
			nemesisHistory{Backend: "etcd", Events: floored(400, "ok"), Faults: []faultRecord{{Kind: "pause-worker", From: ms(150), To: ms(300), Worker: 0, Server: -1}}}},
		{chkDelay, // taken 300 ms after a lost lock's validity, within its 1 s delay; or after it, or after a release
			nemesisHistory{Backend: "redis", Events: delayed(1300, false, 0)},
			nemesisHistory{Backend: "redis", Events: delayed(2001, false, 0)}},
		{chkDelay,
			nemesisHistory{Backend: "redis", Events: delayed(1300, false, 0)},
			nemesisHistory{Backend: "redis", Events: delayed(1300, true, 0)}},
		{chkDelay, // a Release after the loss frees the name at once (WithLockDelay's doc), not before it starts
			nemesisHistory{Backend: "redlock", Events: delayed(1300, false, 1400)},
			nemesisHistory{Backend: "redlock", Events: delayed(1300, false, 1200)}},
	} {
		if v := tc.bad.check(); v.Found[tc.checker] == 0 {
			t.Errorf("%s did not fire on %+v", tc.checker, tc.bad)
		}
		if v := tc.clean.check(); v.Found[tc.checker] != 0 {
			t.Errorf("%s fired on the clean history: %v", tc.checker, v.Samples[tc.checker])
		}
	}
}

// Only go-zookeeper's own race on Conn.lastZxid is set apart from the workers' failures.
func TestUpstreamZKRace(t *testing.T) {
	report := func(first, second string) string {
		return "==================\nWARNING: DATA RACE\nWrite at 0x00c000198780 by goroutine 349:\n  " + first +
			"\n      $GOMODCACHE/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c\n\nPrevious read at 0x00c000198780 by goroutine 120:\n  " + second +
			"\n      $GOMODCACHE/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x4f2\n\nGoroutine 349 (running) created at:\n  github.com/go-zookeeper/zk.(*Conn).loop()\n==================\n"
	}
	upstream := report("github.com/go-zookeeper/zk.(*Conn).recvLoop()", "github.com/go-zookeeper/zk.(*Conn).sendSetWatches()")
	for _, tc := range []struct {
		name   string
		stderr string
		want   bool
	}{
		{"go-zookeeper's race", upstream, true},
		{"the same race twice", upstream + upstream, true},
		{"no race", "panic: boom", false},
		{"a race of ours", report("github.com/go-zookeeper/zk.(*Conn).recvLoop()", "github.com/fencelock/fencelock/zkbackend.(*Backend).settle()"), false},
		{"ours beside it", upstream + report("github.com/fencelock/fencelock/zkbackend.(*Backend).settle()", "github.com/fencelock/fencelock/zkbackend.(*Backend).claim()"), false},
	} {
		if got := upstreamZKRace(tc.stderr); got != tc.want {
			t.Errorf("%s: upstreamZKRace = %v, want %v", tc.name, got, tc.want)
		}
	}
}
