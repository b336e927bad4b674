package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// permitPrefix starts the names of the semaphores of the permit thread, and rwPrefix those of
// its read-write locks, so that the checkers tell them from locks.
const (
	permitPrefix = "sem:"
	rwPrefix     = "rw:"
)

// permitThread takes permits of the semaphores permitPrefix + a lock name, of limit
// cfg.Permits, and read or write locks of the read-write locks rwPrefix + a lock name, holds
// them while it idles and refreshes, and releases them, until the run ends.
//
// Drawn on a stream of their own (x), so that the draws of r stay as old seeds had them: one
// step in four is a burst (permitBurst), several goroutines that take a permit or a read lock
// at once under one owner (this worker's, or one the workers share); and one of the other
// steps in three is a mixed burst: four goroutines that loop on the first name's semaphore
// (permitLoop), asking for the limit cfg.Permits and cfg.Permits+1 by turns, callers that
// disagree.
func (w *nemesisWorker) permitThread(th int) {
	r := rand.New(rand.NewPCG(w.cfg.Seed, 1000))
	x := rand.New(rand.NewPCG(w.cfg.Seed, 1001))
	p := &planner{r: r, names: w.cfg.Names, minTTL: w.cfg.MinTTL, maxTTL: w.cfg.MaxTTL}
	owners := append([]string{fmt.Sprintf("w%d-permits", w.cfg.ID)}, w.cfg.Groups...)
	for time.Now().Before(w.until) {
		name := p.names[r.IntN(len(p.names))]
		s := stepPlan{Name: permitPrefix + name, TTL: drawTTL(r, p.minTTL, p.maxTTL), Watchdog: r.IntN(5) != 0, Op: "permit"}
		if r.IntN(3) == 0 {
			s.Op = "permit-try"
		}
		// Half the steps take a read-write lock instead: a write lock one time in three.
		weight, rw := 1, r.IntN(2) == 0
		if rw {
			s.Name = rwPrefix + name
			if r.IntN(3) == 0 {
				weight = fencelock.RWReaders
			}
		}
		s.Wait = time.Duration(20+r.IntN(3000)) * time.Millisecond
		s.Release = time.Duration(50+r.IntN(2000)) * time.Millisecond
		for range 1 + r.IntN(4) {
			a := p.action(s.TTL)
			if a.Kind != "idle" && a.Kind != "refresh" {
				a = action{Kind: "idle", D: a.D} // a permit guards no fenced write, and is not re-entered
			}
			s.Actions = append(s.Actions, a)
		}
		s.Wait = shortWait(x, s.Wait)
		limit, mixed := w.cfg.Permits, false // limit: see permitLoop for a mixed burst
		switch {
		case x.IntN(4) == 0:
			s.Op, s.Burst = "permit-burst", 2+x.IntN(3)
			s.Owner = owners[x.IntN(len(owners))]
		case x.IntN(3) == 0:
			// Callers that disagree, on the first name's semaphore: two goroutines ask for
			// one permit more than the other two.
			s.Op, s.Burst, mixed = "permit-mixed", 4, true
			s.Name = permitPrefix + p.names[0]
		}
		switch {
		case mixed:
			var wg sync.WaitGroup
			for i := range s.Burst {
				wg.Go(func() { w.permitLoop(s, w.cfg.Permits+i%2, s.Wait) })
			}
			wg.Wait()
		case s.Burst > 0:
			w.permitBurst(th, s, rw, limit)
		default:
			w.permitStep(th, s, weight, limit, rw, nil)
		}
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
}

// permitBurst runs s's goroutines, which take one permit or a read lock each under one owner,
// as one process's goroutines do, behind fillers: goroutines with fresh owners that first take
// what they can of the semaphore (every permit) or the read-write lock (the write lock), so
// that the burst waits in line, and leave one after another, 100 ms apart, handing over to
// it. The burst's goroutines release one after another too, 150 ms apart: a release of one
// must leave the permit to the others. (A burst never takes the write lock: under an owner
// that holds a read lock that would be an upgrade, which is refused.)
func (w *nemesisWorker) permitBurst(th int, s stepPlan, rw bool, limit int) {
	fillers, weight := limit, 1
	if rw {
		fillers, weight = 1, fencelock.RWReaders
	}
	var asked, wg sync.WaitGroup
	for i := range fillers {
		f := stepPlan{Op: "permit-fill", Name: s.Name, TTL: s.TTL, Watchdog: true, Wait: s.Wait, Release: s.Release,
			Actions: []action{{Kind: "idle", D: time.Duration(100+100*i) * time.Millisecond}}}
		asked.Add(1)
		wg.Go(func() { w.permitStep(th, f, weight, limit, rw, asked.Done) })
	}
	asked.Wait()
	for i := range s.Burst {
		s := s
		s.Actions = append(slices.Clone(s.Actions), action{Kind: "idle", D: time.Duration(i) * 150 * time.Millisecond})
		wg.Go(func() { w.permitStep(th, s, 1, limit, rw, nil) })
	}
	wg.Wait()
}

// permitLoop takes permits of s.Name, of limit, and releases each at once, again and again
// for d, as a caller does that loops on a semaphore whose limit others disagree with: many
// attempts while the others hold and come and go, each refused one leaving nothing behind.
func (w *nemesisWorker) permitLoop(s stepPlan, limit int, d time.Duration) {
	for i, end := 0, time.Now().Add(d); time.Now().Before(end) && time.Now().Before(w.until); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+i*37%200)*time.Millisecond)
		g := grantOf{Op: s.Op, Name: s.Name, TTL: s.TTL, Watchdog: s.Watchdog, Limit: limit, Bad: badArgs(s.TTL, 0, 0)}
		lock, h := w.obtain(ctx, g, func(ctx context.Context) (*fencelock.Lock, error) {
			return w.client().Semaphore(s.Name, limit).Acquire(ctx, fencelock.WithTTL(s.TTL), fencelock.WithWatchdog(s.Watchdog))
		})
		cancel()
		if lock == nil {
			time.Sleep(5 * time.Millisecond) // a refusal is at once: not a busy loop
			continue
		}
		time.Sleep(time.Duration(i%3) * 10 * time.Millisecond) // the work, across others' grants
		w.release(lock, h, time.Second)
	}
}

// permitStep takes what s says of a semaphore of limit (or of a read-write lock), holds it
// while it does s's actions, and releases it. asked, if not nil, is called once the call that
// takes it returned.
func (w *nemesisWorker) permitStep(th int, s stepPlan, weight, limit int, rw bool, asked func()) {
	w.out.emit(nemEvent{K: "state", Th: th, State: "waiting"})
	ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
	g := grantOf{Op: s.Op, Name: s.Name, TTL: s.TTL, Watchdog: s.Watchdog, Weight: weight, Bad: badArgs(s.TTL, 0, 0)}
	if !rw {
		g.Limit = limit
	}
	sem, rwl := w.client().Semaphore(s.Name, limit), w.client().RWLock(s.Name)
	lock, h := w.obtain(ctx, g, func(ctx context.Context) (*fencelock.Lock, error) {
		opts := []fencelock.Option{fencelock.WithTTL(s.TTL), fencelock.WithWatchdog(s.Watchdog)}
		if s.Owner != "" {
			opts = append(opts, fencelock.WithOwner(s.Owner))
		}
		try := s.Op == "permit-try"
		switch {
		case rw && weight > 1 && try:
			return rwl.TryLock(ctx, opts...)
		case rw && weight > 1:
			return rwl.Lock(ctx, opts...)
		case rw && try:
			return rwl.TryRLock(ctx, opts...)
		case rw:
			return rwl.RLock(ctx, opts...)
		case try:
			return sem.TryAcquire(ctx, opts...)
		}
		return sem.Acquire(ctx, opts...)
	})
	cancel()
	if asked != nil {
		asked()
	}
	if lock == nil {
		w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
		return
	}
	holding := "holding"
	if s.Owner != "" && s.Owner != fmt.Sprintf("w%d-permits", w.cfg.ID) {
		holding = "holding-shared"
	}
	w.hold(th, lock, h, s, holding)
}

// electPrefix starts the names of the elections of the election thread. An election is the
// lock of its name, and a term its token, so the lock checkers watch its leaders as they watch
// locks: one leader believed valid at a time, terms that grow, no old term's write accepted.
const electPrefix = "elect:"

// electThread campaigns in the elections electPrefix + a lock name, and while it leads idles,
// refreshes and writes to the fenced store stamped with the term, then resigns, until the run
// ends. Half the steps, drawn on a stream of their own (x), run under Election.Lead instead,
// as a daemon does (leadStep).
func (w *nemesisWorker) electThread(th int) {
	r := rand.New(rand.NewPCG(w.cfg.Seed, 2000))
	x := rand.New(rand.NewPCG(w.cfg.Seed, 2001))
	p := &planner{r: r, names: w.cfg.Names, minTTL: w.cfg.MinTTL, maxTTL: w.cfg.MaxTTL}
	for time.Now().Before(w.until) {
		s := stepPlan{Name: electPrefix + p.names[r.IntN(len(p.names))], TTL: drawTTL(r, p.minTTL, p.maxTTL), Watchdog: r.IntN(5) != 0, Op: "campaign"}
		s.Wait = time.Duration(20+r.IntN(3000)) * time.Millisecond
		s.Release = time.Duration(50+r.IntN(2000)) * time.Millisecond
		for range 1 + r.IntN(4) {
			a := p.action(s.TTL)
			if a.Kind == "reenter" {
				a = action{Kind: "write"} // a Campaign from a leader's context is another contender
			}
			s.Actions = append(s.Actions, a)
		}
		if x.IntN(2) == 0 {
			// A daemon's term is short: a stop of its process outlasts it, and the next
			// leader is in office when it resumes.
			s.Op, s.TTL = "lead", drawTTL(x, p.minTTL, max(p.minTTL, 2*time.Second))
			w.leadStep(th, s)
			continue
		}
		w.out.emit(nemEvent{K: "state", Th: th, State: "waiting"})
		ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
		e := w.client().Election(s.Name, fencelock.WithTTL(s.TTL), fencelock.WithWatchdog(s.Watchdog))
		g := grantOf{Op: s.Op, Name: s.Name, TTL: s.TTL, Watchdog: s.Watchdog, Bad: badArgs(s.TTL, 0, 0)}
		lock, h := w.obtain(ctx, g, func(ctx context.Context) (*fencelock.Lock, error) {
			l, err := e.Campaign(ctx, fmt.Sprintf("worker %d", w.cfg.ID))
			if err != nil {
				return nil, err
			}
			return l.Lock(), nil
		})
		cancel()
		if lock == nil {
			w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
			continue
		}
		w.hold(th, lock, h, s, "holding") // its release is Resign
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
}

// A leader under Lead works as a busy daemon does: it computes for leadWork, looking at its
// context as it goes, writes, and sleeps for leadRest, over and over. A stop of its process
// then often finds it running, and it runs on at once when the process resumes, before any
// timer of the process has fired.
const (
	leadWork = 2 * time.Millisecond
	leadRest = 8 * time.Millisecond
)

// leadStep runs one Election.Lead as a daemon's main loop does: its context allows the
// campaign's wait and the work, within a wait of the run's end. fn works on as a user's does, looking only at its own context:
// it writes to the fenced store, stamped with its term, only while ctx.Err() is nil: while it
// works (leadWork) for a "refresh" action (Lead hands out no Lock to refresh), once for a
// "write"; it waits on ctx for an "idle"; it returns once its actions are done, or its context
// ended.
// A term is reported as a grant, with the owner and start the observer told, so that the
// checkers watch its writes as they watch a lock's.
func (w *nemesisWorker) leadStep(th int, s stepPlan) {
	work := s.Wait
	for _, a := range s.Actions {
		work += a.D
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "waiting"})
	// Lead campaigns again after a lost term: not past the run's end by more than a wait.
	ctx, cancel := context.WithTimeout(context.Background(), min(work+time.Second, time.Until(w.until)+s.Wait))
	defer cancel()
	ctx, tag := tagCall(ctx)
	e := w.client().Election(s.Name, fencelock.WithTTL(s.TTL), fencelock.WithWatchdog(s.Watchdog))
	start := time.Now()
	err := e.Lead(ctx, fmt.Sprintf("worker %d", w.cfg.ID), func(fctx context.Context, term int64) error {
		owner, tok, began := tag.get()
		if tok != term {
			owner, began = "", start // not told: the checkers then see another owner's writes
		}
		h := w.seq.Add(1)
		w.out.emit(nemEvent{K: "grant", Op: "lead", L: h, Name: s.Name, Owner: owner, Tok: term, TTL: s.TTL, Start: began.UnixNano(), Ret: time.Now().UnixNano(),
			NoWatchdog: !s.Watchdog})
		done := fctx.Done()
		w.watch.Go(func() {
			<-done
			cause := context.Cause(fctx)
			w.out.emit(nemEvent{K: "done", L: h, Name: s.Name, Owner: owner, Tok: term, Ret: time.Now().UnixNano(),
				Lost: errors.Is(cause, fencelock.ErrLost) && !errors.Is(cause, fencelock.ErrClosed), Err: errText(cause)})
		})
		w.out.emit(nemEvent{K: "state", Th: th, State: "leading"})
		defer w.out.emit(nemEvent{K: "state", Th: th, State: "releasing"})
		valid := func() error { return fctx.Err() }
		for _, a := range s.Actions {
			if time.Now().After(w.until) {
				break
			}
			switch a.Kind {
			case "write":
				w.writeIf(valid, s.Name, owner, term, h)
			case "idle":
				t := time.NewTimer(a.D)
				select {
				case <-fctx.Done():
				case <-t.C:
				}
				t.Stop()
			case "refresh":
				for end := time.Now().Add(a.D); time.Now().Before(end) && fctx.Err() == nil; time.Sleep(leadRest) {
					for spin := time.Now().Add(leadWork); time.Now().Before(spin) && fctx.Err() == nil; {
					}
					w.writeIf(valid, s.Name, owner, term, h)
				}
			}
			if err := fctx.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	ret := time.Now()
	dl, _ := ctx.Deadline()
	w.out.emit(w.reported(nemEvent{K: "call", Op: "lead", Name: s.Name, TTL: s.TTL, Start: start.UnixNano(), Ret: ret.UnixNano(), Dl: dl.UnixNano(),
		Class: errClass(err), Err: errText(err), Bad: badArgs(s.TTL, 0, 0)}))
	w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
}
