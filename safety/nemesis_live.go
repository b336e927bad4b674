package safety

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock"
)

// livePrefix starts the names of the locks of the live thread, and liveSemPrefix those of its
// semaphores (of limit 1). Only that thread uses them, with TTLs of liveMaxTTL or less, so that
// a name held for no one shows within seconds (checker k).
const (
	livePrefix    = "live:"
	liveSemPrefix = "livesem:"
	liveMaxTTL    = time.Second
)

// liveThread draws, on a stream of its own, until the run ends: an Obtain or a TryObtain of a
// live lock, or an Acquire or a TryAcquire of a live semaphore, with a context that ends within
// 0 to 5 ms two times in three (its request then often in flight), else within 20 ms to 1 s;
// when it gets one, it idles up to 300 ms and releases it, or, one time in forty, closes the
// worker's Client while it holds it (and another call of that Client waits behind it, which
// the lock then comes to after the Client closed) and goes on with a new one. After half the steps it probes
// a live name: one attempt, and when that finds the name held, Inspect says by whom, which
// checker k weighs against what every worker believed and had in flight.
func (w *nemesisWorker) liveThread(th int) {
	r := rand.New(rand.NewPCG(w.cfg.Seed, 3000))
	lo := max(w.cfg.MinTTL, 25*time.Millisecond)
	hi := max(lo, liveMaxTTL)
	for time.Now().Before(w.until) {
		name, sem := w.liveName(r)
		ttl := drawTTL(r, lo, hi)
		wait := time.Duration(20+r.IntN(980)) * time.Millisecond
		if r.IntN(3) != 0 {
			wait = time.Duration(r.IntN(6)) * time.Millisecond
		}
		try, closing := r.IntN(2) == 0, r.IntN(40) == 0
		idle := time.Duration(1+r.IntN(300)) * time.Millisecond
		release := time.Duration(50+r.IntN(950)) * time.Millisecond
		probe := r.IntN(2) == 0
		pname, psem := w.liveName(r)
		pause := time.Duration(20+r.IntN(180)) * time.Millisecond

		w.out.emit(nemEvent{K: "state", Th: th, State: "waiting"})
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		lock, h, _ := w.liveTake(ctx, name, sem, try, ttl)
		cancel()
		if lock != nil {
			w.out.emit(nemEvent{K: "state", Th: th, State: "holding"})
			time.Sleep(idle)
			if closing {
				waiting := w.waitBehind(name, sem, ttl)
				w.reopen() // and no Release after: a program that closes its Client is done
				<-waiting
			} else {
				w.out.emit(nemEvent{K: "state", Th: th, State: "releasing"})
				w.release(lock, h, release)
			}
		}
		w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
		if probe {
			w.probe(pname, psem, lo)
		}
		time.Sleep(pause)
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
}

// waitBehind starts a call of the worker's Client on name, held by the live thread, and returns
// once it waits in line behind that hold (or ended, or a second passed) a channel closed when
// the call has returned. Closed then, the Client releases the thread's hold, the lock comes to
// the waiting call, which fails with ErrClosed and must release it before it returns (checker
// k: a closed call's owner holding the name after that is held for no one).
func (w *nemesisWorker) waitBehind(name string, sem bool, ttl time.Duration) <-chan struct{} {
	inLine, done := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), inLineKey{}, inLine), time.Second)
		defer cancel()
		if lock, h, _ := w.liveTake(ctx, name, sem, false, ttl); lock != nil {
			w.release(lock, h, time.Second)
		}
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-inLine:
	case <-done:
	case <-t.C:
	}
	return done
}

// liveName draws a live name: a lock's, or a semaphore's where the backend keeps them.
func (w *nemesisWorker) liveName(r *rand.Rand) (string, bool) {
	name := w.cfg.Names[r.IntN(len(w.cfg.Names))]
	if r.IntN(2) == 0 && w.cfg.Permits > 0 {
		return liveSemPrefix + name, true
	}
	return livePrefix + name, false
}

// liveTake makes one acquisition of a live name and reports it.
func (w *nemesisWorker) liveTake(ctx context.Context, name string, sem, try bool, ttl time.Duration) (*fencelock.Lock, int64, error) {
	op := "live"
	if try {
		op = "live-try"
	}
	g := grantOf{Op: op, Name: name, TTL: ttl, Watchdog: true}
	if sem {
		g.Limit = 1
	}
	return w.obtainErr(ctx, g, func(ctx context.Context) (*fencelock.Lock, error) {
		c, opt := w.client(), fencelock.WithTTL(ttl)
		switch {
		case sem && try:
			return c.Semaphore(name, 1).TryAcquire(ctx, opt)
		case sem:
			return c.Semaphore(name, 1).Acquire(ctx, opt)
		case try:
			return c.TryObtain(ctx, name, opt)
		}
		return c.Obtain(ctx, name, opt)
	})
}

// probe makes one attempt at name, and when it finds the name held, asks Inspect who holds it:
// a probe event names them, with Start when Inspect was called.
func (w *nemesisWorker) probe(name string, sem bool, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	lock, h, err := w.liveTake(ctx, name, sem, true, ttl)
	if lock != nil {
		w.release(lock, h, time.Second)
		return
	}
	if errClass(err) != "held" {
		return
	}
	start := time.Now()
	var holders []nemHolder
	if sem {
		info, err := w.client().Semaphore(name, 1).Inspect(ctx)
		if err != nil {
			return
		}
		for _, p := range info.Permits {
			holders = append(holders, nemHolder{Owner: p.Owner, Tok: p.Token})
		}
	} else {
		info, err := w.client().Inspect(ctx, name)
		if err != nil {
			return
		}
		if info.Held {
			holders = append(holders, nemHolder{Owner: info.Owner, Tok: info.Token})
		}
	}
	if len(holders) > 0 {
		w.out.emit(nemEvent{K: "probe", Name: name, Start: start.UnixNano(), Ret: time.Now().UnixNano(), Holders: holders})
	}
}

// reopen closes the worker's Client while this thread (and maybe others) holds, with a new
// Client on the same Backend in its place for every call after: the handles of the closed one
// end with ErrClosed, and their holds must leave the store (checker k).
func (w *nemesisWorker) reopen() {
	start := time.Now() // every handle granted before it is the closed Client's
	old := w.locker.Swap(w.newClient())
	err := old.Close()
	w.out.emit(nemEvent{K: "close", Start: start.UnixNano(), Ret: time.Now().UnixNano(), Class: errClass(err), Err: errText(err)})
}
