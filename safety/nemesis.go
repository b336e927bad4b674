package safety

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"
)

// The nemesis runs many worker processes' random operations against one backend while it
// injects faults at random: workers and servers stopped with SIGSTOP, servers killed and
// restarted, links cut, silenced or delayed, keys deleted. Everything it does comes from one
// seed: the workers' operations and the faults' kinds and times are drawn from it up front,
// so FENCELOCK_NEMESIS_SEED replays a failing run's schedule. What the servers answer, and so
// which worker a fault finds waiting or holding, still depends on timing.
//
// The checkers (nemesis_check.go) read the history the workers, the store and the nemesis
// recorded, all stamped with this machine's wall clock.

const (
	// CallSlack is how long past its context's deadline a call may return: Obtain, TryObtain,
	// Refresh and Release each return by their context's deadline plus this.
	CallSlack = 100 * time.Millisecond
	// DoneSlack is how long after a lock's validity deadline its Done channel may close when
	// nothing polls the lock.
	DoneSlack = 100 * time.Millisecond
	// pauseGrace is added to the end of every SIGSTOP of a worker, for the time the resumed
	// process takes to run its goroutines again: a timer that was due during the pause fires
	// only once the process runs.
	pauseGrace = 50 * time.Millisecond
	// spuriousMinTTL is the shortest TTL for which a loss with no fault near it is a finding:
	// with shorter TTLs, a loaded machine's scheduling delay alone can miss a renewal.
	spuriousMinTTL = 2 * time.Second
	// permitLimit is the limit of the semaphores of the workers' permit thread.
	permitLimit = 2
)

// ttlMenu are the TTLs the workers draw, across the regimes the code branches on: below and
// at MinTTL (10ms), short enough that a renewal interval is a few ms, around redisbackend's
// 5s hand-over cap, and long enough (5m33s and beyond) that the drift allowance (1% of the
// TTL) exceeds a third of the hand-over, and beyond 10 minutes.
var ttlMenu = []struct {
	ttl    time.Duration
	weight int
}{
	{9 * time.Millisecond, 1}, // below MinTTL: must be refused as invalid
	{10 * time.Millisecond, 1},
	{25 * time.Millisecond, 3},
	{60 * time.Millisecond, 4},
	{150 * time.Millisecond, 6},
	{400 * time.Millisecond, 6},
	{time.Second, 5},
	{2 * time.Second, 4},
	{4900 * time.Millisecond, 2},
	{5 * time.Second, 2},
	{5100 * time.Millisecond, 2},
	{8 * time.Second, 2},
	{30 * time.Second, 2},
	{333 * time.Second, 2},
	{6 * time.Minute, 3},
	{510 * time.Second, 2},
	{12 * time.Minute, 2},
}

// drawTTL picks a TTL from the menu, within [lo, hi] when those are set.
func drawTTL(r *rand.Rand, lo, hi time.Duration) time.Duration {
	total := 0
	for _, m := range ttlMenu {
		if m.ttl >= lo && (hi == 0 || m.ttl <= hi) {
			total += m.weight
		}
	}
	n := r.IntN(total)
	for _, m := range ttlMenu {
		if m.ttl >= lo && (hi == 0 || m.ttl <= hi) {
			if n < m.weight {
				return m.ttl
			}
			n -= m.weight
		}
	}
	return ttlMenu[len(ttlMenu)-1].ttl
}

// stepPlan is one operation of a worker thread and what it does with the lock if it gets it,
// drawn whole before it runs, so that the random stream does not depend on what happened.
type stepPlan struct {
	Op       string        // "obtain", "try", or "burst": several goroutines at once with one owner
	Name     string        // the lock name
	TTL      time.Duration // the lock's TTL
	Renew    time.Duration // WithRenewInterval; zero for the default
	Watchdog bool
	Owner    string        // WithOwner; empty for a fresh owner
	Wait     time.Duration // the obtain's context deadline, from its start
	Burst    int           // goroutines of a burst
	Actions  []action      // what a holder does, in order, before it releases
	Release  time.Duration // the release's context deadline
	// The lease policy (WithMaxHold, WithMinHold, WithLockDelay; zero for none), drawn by
	// drawLease on a stream of its own.
	MaxHold, MinHold, Delay time.Duration
}

// drawLease draws a step's lease policy: now and then a cap (WithMaxHold) shorter than many
// of the holds, so that holders reach it while they act; a minimum (WithMinHold) that outlasts
// most of the holds, so that releases come before it; and, where the store ends locks by their
// TTL (delays), a lock delay. It draws the same numbers whatever it keeps, so that the steps
// after stay as they were. A minimum longer than the cap is invalid: it is cut to the cap.
func drawLease(r *rand.Rand, s *stepPlan, delays bool) {
	capped, floored, delayed := r.IntN(4) == 0, r.IntN(4) == 0, r.IntN(4) == 0
	maxHold := []time.Duration{300, 1000, 3000}[r.IntN(3)] * time.Millisecond
	minHold := []time.Duration{100, 500, 1500}[r.IntN(3)] * time.Millisecond
	delay := []time.Duration{200, 1000}[r.IntN(2)] * time.Millisecond
	if capped {
		s.MaxHold = maxHold
	}
	if floored {
		s.MinHold = minHold
		if capped {
			s.MinHold = min(minHold, maxHold)
		}
	}
	if delayed && delays {
		s.Delay = delay
	}
}

// action is one thing a holder does.
type action struct {
	Kind string        // "write", "idle", "refresh", "reenter"
	D    time.Duration // idle: how long; refresh and reenter: the call's context deadline
	TTL  time.Duration // refresh and reenter: the TTL asked for
}

// planner draws a worker thread's steps.
type planner struct {
	r      *rand.Rand
	names  []string
	owners []string // shared owners this thread may use: its worker's, and the cross-process groups
	minTTL time.Duration
	maxTTL time.Duration
}

func (p *planner) next() stepPlan {
	r := p.r
	s := stepPlan{Name: p.names[r.IntN(len(p.names))], TTL: drawTTL(r, p.minTTL, p.maxTTL), Watchdog: r.IntN(5) != 0}
	switch n := r.IntN(10); {
	case n < 5:
		s.Op = "obtain"
	case n < 8:
		s.Op = "try"
	default:
		s.Op, s.Burst = "burst", 2+r.IntN(3)
	}
	if s.Op == "burst" || r.IntN(4) == 0 {
		s.Owner = p.owners[r.IntN(len(p.owners))]
	}
	switch n := r.IntN(10); {
	case n < 2: // short enough that a Refresh to a far shorter TTL is allowed
		s.Renew = min(5*time.Millisecond, (s.TTL-s.TTL/100-2*time.Millisecond)/2)
	case n == 2: // the longest interval allowed
		s.Renew = (s.TTL - s.TTL/100 - 2*time.Millisecond) / 2
	case n == 3: // a millisecond past it: must be refused as invalid
		s.Renew = (s.TTL-s.TTL/100-2*time.Millisecond)/2 + time.Millisecond
	}
	// Waits from a cancel mid-wait (tens of ms) to a few seconds.
	s.Wait = time.Duration(20+r.IntN(3000)) * time.Millisecond
	s.Release = time.Duration(50+r.IntN(2000)) * time.Millisecond
	for range 1 + r.IntN(6) {
		s.Actions = append(s.Actions, p.action(s.TTL))
	}
	return s
}

// action draws one thing to do while holding a lock of the given TTL. Idle times reach past
// short TTLs, so that a holder whose renewals failed is still around when its validity ends,
// and stay under 2s so that a run ends on time.
func (p *planner) action(ttl time.Duration) action {
	r := p.r
	idle := min(2*ttl, 2*time.Second)
	a := action{D: time.Duration(1+r.Int64N(int64(idle/time.Millisecond))) * time.Millisecond}
	switch n := r.IntN(10); {
	case n < 4:
		a.Kind = "write"
	case n < 6:
		a.Kind = "idle"
	case n < 8:
		a.Kind, a.TTL = "refresh", p.otherTTL(ttl)
		a.D = time.Duration(20+r.IntN(1500)) * time.Millisecond
	default:
		a.Kind, a.TTL = "reenter", p.otherTTL(ttl)
		a.D = time.Duration(20+r.IntN(1500)) * time.Millisecond
	}
	return a
}

// otherTTL is a TTL for a refresh or a re-entry: as often shorter as longer than ttl.
func (p *planner) otherTTL(ttl time.Duration) time.Duration {
	for range 8 {
		t := drawTTL(p.r, p.minTTL, p.maxTTL)
		if t != ttl {
			return t
		}
	}
	return ttl
}

// faultPlan is one fault of the nemesis, drawn before the run.
type faultPlan struct {
	At     time.Duration // from the start of the run
	Kind   string        // see faultKinds
	Target int           // which worker or server, reduced modulo the count when it runs
	Other  int           // the server of a link fault
	Class  string        // pause of a worker: "waiting", "holding", "releasing", "any", or "leading" (planMore)
	Pinned bool          // pause of a worker: Target is the worker, whatever it is doing
	D      time.Duration // how long it lasts
}

// faultKinds are what the nemesis can do, each with its weight; a backend that cannot do one
// (an in-process etcd cannot be stopped with SIGSTOP) leaves it out.
var faultKinds = []struct {
	kind   string
	weight int
}{
	{"pause-worker", 8},
	{"pause-server", 2},
	{"restart-server", 2},
	{"cut", 3},
	{"blackhole", 2},
	{"delay", 2},
	{"delete-key", 3},
	// "oom" is drawn apart, by planMore.
}

// planMore adds to faults, drawn from r (a stream of their own, so that the faults
// planFaults draws, and the schedules old seeds replay, stay as they were): one or two
// SIGSTOPs of a worker whose election thread leads under Election.Lead, longer than most
// terms, so that the next leader is in office when it resumes; and, where the servers are
// Redis (oom), one or two "oom" faults of a server: its maxmemory set below the memory it uses,
// under noeviction, so that it refuses writes.
func planMore(faults []faultPlan, r *rand.Rand, d time.Duration, oom bool) []faultPlan {
	out := slices.Clone(faults)
	at := func() time.Duration {
		return 300*time.Millisecond + time.Duration(r.Int64N(int64(max(d-1300*time.Millisecond, time.Millisecond))))
	}
	for range 1 + r.IntN(2) {
		out = append(out, faultPlan{At: at(), Kind: "pause-worker", Class: "leading", Target: r.IntN(1 << 20),
			D: []time.Duration{400, 1200, 2500}[r.IntN(3)] * time.Millisecond})
	}
	for range 1 + r.IntN(2) {
		f := faultPlan{At: at(), Kind: "oom", Other: r.IntN(1 << 20), D: time.Duration(50+r.IntN(2000)) * time.Millisecond}
		if oom {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b faultPlan) int { return cmp.Compare(a.At, b.At) })
	return out
}

// planFaults draws the faults of a run of length d: one every 150ms to 1.2s for 3 to 6
// seconds, then none for 3 to 5 seconds, so that a loss with no fault near it can be told.
func planFaults(r *rand.Rand, d time.Duration, can func(kind string) bool) []faultPlan {
	var out []faultPlan
	total := 0
	for _, k := range faultKinds {
		if can(k.kind) {
			total += k.weight
		}
	}
	classes := []string{"waiting", "holding", "releasing", "any"}
	quietAt := time.Duration(3000+r.IntN(3000)) * time.Millisecond
	for at := 300 * time.Millisecond; at < d; at += time.Duration(150+r.IntN(1050)) * time.Millisecond {
		if at > quietAt {
			at += time.Duration(3000+r.IntN(2000)) * time.Millisecond
			quietAt = at + time.Duration(3000+r.IntN(3000))*time.Millisecond
		}
		f := faultPlan{At: at, Target: r.IntN(1 << 20), Other: r.IntN(1 << 20), Class: classes[r.IntN(len(classes))]}
		n := r.IntN(total)
		for _, k := range faultKinds {
			if !can(k.kind) {
				continue
			}
			if n < k.weight {
				f.Kind = k.kind
				break
			}
			n -= k.weight
		}
		// Pauses from a few ms to past the 5s hand-over; the rest shorter.
		switch f.Kind {
		case "pause-worker":
			f.D = []time.Duration{30, 150, 400, 1200, 2500, 5600}[r.IntN(6)] * time.Millisecond
		default:
			f.D = time.Duration(50+r.IntN(2000)) * time.Millisecond
		}
		out = append(out, f)
	}
	return out
}
