package safety

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
)

// nemesisWorkerEnv carries a nemesis worker's configuration when the test binary runs as one.
const nemesisWorkerEnv = "FENCELOCK_NEMESIS_WORKER"

// A worker is the test binary run again with nemesisWorkerEnv set: it runs before the tests
// would, and exits.
func init() {
	if raw := os.Getenv(nemesisWorkerEnv); raw != "" {
		os.Exit(runNemesisWorker(raw))
	}
}

// nemesisWorkerConfig is what a worker process is told, through its environment.
type nemesisWorkerConfig struct {
	ID      int           `json:"id"`
	Seed    uint64        `json:"seed"`
	Backend string        `json:"backend"`          // redis, redlock, etcd, zk
	Client  string        `json:"client,omitempty"` // redis, redlock: go-redis (default), rueidis or valkey-go
	Addrs   []string      `json:"addrs"`            // the worker's own proxies, one per server
	Session time.Duration `json:"session"`          // ZooKeeper's session timeout
	Store   string        `json:"store"`
	Names   []string      `json:"names"`
	Groups  []string      `json:"groups"` // owner IDs shared with the other workers
	Threads int           `json:"threads"`
	// Permits, when positive, adds a thread that takes permits of semaphores of that limit
	// (named permitPrefix + a lock name) on a random stream of its own, so that the lock
	// threads' schedules, and the seeds that replay them, stay as they were.
	Permits int `json:"permits,omitempty"`
	// Elections adds a thread that campaigns in elections (named electPrefix + a lock name),
	// writes to the fenced store with its term while it leads, and resigns, on a random stream
	// of its own too.
	Elections bool `json:"elections,omitempty"`
	// Live adds a thread that takes locks and permits of the names livePrefix and
	// liveSemPrefix + a lock name with short TTLs and contexts that end within milliseconds,
	// asks who holds them, and now and then closes the worker's Client while it holds one (see
	// liveThread), on a random stream of its own.
	Live bool `json:"live,omitempty"`
	// Lease makes the lock threads draw a lease policy for their steps (drawLease), on a
	// stream of their own: a cap, a minimum, and where the backend's locks end by their TTL
	// (Redis, Redlock) a lock delay.
	Lease  bool          `json:"lease,omitempty"`
	Until  int64         `json:"until"` // Unix ns: no operation starts after it
	MinTTL time.Duration `json:"min_ttl"`
	MaxTTL time.Duration `json:"max_ttl"`
	// Broken makes the worker misbehave on purpose, to show that the checkers fire: a
	// comma-separated list of the modes in brokenModes.
	Broken string `json:"broken,omitempty"`
}

// brokenModes are the deliberate faults of a broken worker, each seen by one checker.
var brokenModes = map[string]string{
	"unfenced":     "writes to the store unfenced (a)",
	"fake-token":   "reports its grants with a token 10^12 below the real one (b)",
	"ignore-valid": "writes without checking Valid() (c)",
	"late-done":    "reports every Done as closing 3×DoneSlack after the validity deadline (d)",
	"late-return":  "reports its calls' deadlines as their start (e)",
	"no-ttl":       "sets a key without a TTL in Redis (f)",
	"leak":         "leaves a goroutine running when it exits (f)",
	"self-delete":  "deletes its own lock key behind the library's back (g)",
	"skew-clock":   "gives the Client a clock 20ms behind (h)",
}

type nemesisWorker struct {
	cfg    nemesisWorkerConfig
	broken map[string]bool
	// locker is the Client every thread calls; liveThread closes it now and then and puts a
	// new one on the same Backend in its place (reopen).
	locker atomic.Pointer[fencelock.Client]
	b      *nemesisBackend
	out    *eventOut
	hc     *http.Client
	seq    atomic.Int64
	until  time.Time
	watch  sync.WaitGroup // the Done watchers of the lock handles
}

func runNemesisWorker(raw string) int {
	base := goleak.IgnoreCurrent()
	var cfg nemesisWorkerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w := &nemesisWorker{cfg: cfg, broken: map[string]bool{}, out: &eventOut{w: bufio.NewWriter(os.Stdout), id: cfg.ID},
		hc: &http.Client{Timeout: 10 * time.Second}, until: time.Unix(0, cfg.Until)}
	for _, m := range strings.Split(cfg.Broken, ",") {
		if m != "" {
			w.broken[m] = true
		}
	}
	b, err := openNemesisBackend(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w.b = b
	w.locker.Store(w.newClient())
	w.misbehave()

	var wg sync.WaitGroup
	stalls, quiet := make(chan struct{}), make(chan struct{})
	go func() { defer close(stalls); w.watchStalls(quiet) }()
	for th := range cfg.Threads {
		wg.Go(func() { w.thread(th) })
	}
	if cfg.Permits > 0 {
		wg.Go(func() { w.permitThread(cfg.Threads) })
	}
	if cfg.Elections {
		wg.Go(func() { w.electThread(cfg.Threads + 1) })
	}
	if cfg.Live {
		wg.Go(func() { w.liveThread(cfg.Threads + 2) })
	}
	wg.Wait()
	close(quiet)
	<-stalls
	w.watch.Wait()
	_ = w.client().Close()
	b.close()
	w.hc.CloseIdleConnections()
	if err := goleak.Find(base); err != nil {
		w.out.emit(nemEvent{K: "leak", Err: oneLine(err.Error())})
	}
	return 0
}

// client returns the Client the threads call now.
func (w *nemesisWorker) client() *fencelock.Client { return w.locker.Load() }

// newClient makes a Client on the worker's Backend. Its observer puts the watchdog's renewals
// in the history, so that a finding about a lost lock shows what its renewals met, and tells
// each tagged call (tagCall) its owner and token.
func (w *nemesisWorker) newClient() *fencelock.Client {
	opts := []fencelock.ClientOption{fencelock.WithObserver(func(e fencelock.Event) {
		switch e.Kind {
		case fencelock.EventObtained, fencelock.EventNotObtained:
			if t, ok := e.Context.Value(callTagKey{}).(*callTag); ok {
				t.set(e.Owner, e.Token, time.Now().Add(-e.Duration))
			}
		case fencelock.EventWaiting:
			if ch, ok := e.Context.Value(inLineKey{}).(chan struct{}); ok {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		case fencelock.EventCleanup:
			// What an acquisition that was not handed out may have left, or a release not
			// confirmed in time, under this owner: undone (or not) by now.
			w.out.emit(nemEvent{K: "cleanup", Name: e.Name, Owner: e.Owner, Tok: e.Token, Ret: time.Now().UnixNano(), Class: errClass(e.Err), Err: errText(e.Err)})
		case fencelock.EventRenewed, fencelock.EventRenewFailed:
			ret := time.Now()
			w.out.emit(nemEvent{K: "renew", Name: e.Name, Tok: e.Token, Start: ret.Add(-e.Duration).UnixNano(), Ret: ret.UnixNano(), Class: errClass(e.Err), Err: errText(e.Err)})
		}
	})}
	if w.broken["skew-clock"] {
		opts = append(opts, fencelock.WithClock(func() time.Time { return time.Now().Add(-20 * time.Millisecond) }))
	}
	return fencelock.New(w.b.backend, opts...)
}

// callTag is what the observer tells of the last Obtain, TryObtain or Campaign made under a
// context tagged with it: the owner it went under (also for a call that failed, which
// leaves nothing else to name what it may have left in the store), the token and the start.
type callTag struct {
	mu    sync.Mutex
	owner string
	tok   int64
	start time.Time
}

type callTagKey struct{}

// inLineKey is the key of a channel a call's context may carry: the observer sends to it
// (without waiting) when the call begins to wait behind another holder.
type inLineKey struct{}

// tagCall returns ctx tagged with a new callTag.
func tagCall(ctx context.Context) (context.Context, *callTag) {
	t := &callTag{}
	return context.WithValue(ctx, callTagKey{}, t), t
}

func (t *callTag) set(owner string, tok int64, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.owner, t.tok, t.start = owner, tok, start
}

func (t *callTag) get() (owner string, tok int64, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owner, t.tok, t.start
}

// misbehave starts the broken modes that act once, at the start.
func (w *nemesisWorker) misbehave() {
	if w.broken["no-ttl"] && w.b.direct != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.b.direct.Set(ctx, fmt.Sprintf("nemesis:broken:%d", w.cfg.ID), "x", 0).Err()
		cancel()
	}
	if w.broken["leak"] {
		go func() { select {} }()
	}
	own := fmt.Sprintf("nem-own-%d", w.cfg.ID) // a name no other worker uses: free at once
	if w.broken["ignore-valid"] {
		// Hold a short lock and write until the run's last second without looking: the
		// nemesis stops this worker meanwhile, and others take the lock. The lock is one the
		// other workers use, and the line for it can be seconds long: the wait and the writes
		// span the run, so that a pause falls into them however late the grant comes.
		w.prologue("obtain", w.cfg.Names[0], 150*time.Millisecond, time.Until(w.until)-2*time.Second, func(lock *fencelock.Lock, h int64) {
			for end := w.until.Add(-time.Second); time.Now().Before(end); time.Sleep(30 * time.Millisecond) {
				w.write(lock, h)
			}
		})
	}
	if w.broken["skew-clock"] {
		w.prologue("try", own, time.Second, 5*time.Second, func(*fencelock.Lock, int64) {})
	}
	if w.broken["self-delete"] {
		w.prologue("try", own, 3*time.Second, 5*time.Second, func(lock *fencelock.Lock, _ int64) {
			select {
			case <-lock.Context().Done():
			case <-time.After(3 * time.Second):
			}
		})
	}
}

// prologue is a broken worker's first step: it takes name with ttl (op: "try" or "obtain"),
// waiting at most wait for it, does fn with it, and releases it.
func (w *nemesisWorker) prologue(op, name string, ttl, wait time.Duration, fn func(*fencelock.Lock, int64)) {
	ctx, cancel := context.WithTimeout(context.Background(), max(wait, time.Second))
	lock, h := w.obtain(ctx, grantOf{Op: op, Name: name, TTL: ttl, Watchdog: true}, func(ctx context.Context) (*fencelock.Lock, error) {
		if op == "try" {
			return w.client().TryObtain(ctx, name, fencelock.WithTTL(ttl))
		}
		return w.client().Obtain(ctx, name, fencelock.WithTTL(ttl))
	})
	cancel()
	if lock == nil {
		return
	}
	w.out.emit(nemEvent{K: "state", State: "holding"})
	fn(lock, h)
	w.out.emit(nemEvent{K: "state", State: "releasing"})
	w.release(lock, h, time.Second)
	w.out.emit(nemEvent{K: "state", State: "idle"})
}

func (w *nemesisWorker) thread(th int) {
	owners := append([]string{fmt.Sprintf("w%d-shared", w.cfg.ID)}, w.cfg.Groups...)
	p := &planner{r: rand.New(rand.NewPCG(w.cfg.Seed, uint64(th))), names: w.cfg.Names, owners: owners, minTTL: w.cfg.MinTTL, maxTTL: w.cfg.MaxTTL}
	short := rand.New(rand.NewPCG(w.cfg.Seed, uint64(100+th))) // see shortWait
	lease := rand.New(rand.NewPCG(w.cfg.Seed, uint64(300+th))) // see drawLease
	for time.Now().Before(w.until) {
		s := p.next()
		s.Wait = shortWait(short, s.Wait)
		if w.cfg.Lease {
			drawLease(lease, &s, w.cfg.Backend == "redis" || w.cfg.Backend == "redlock")
		}
		if s.Op != "burst" {
			w.step(th, s)
			continue
		}
		// Several goroutines obtain the lock at once under one owner: each one's grant re-enters
		// the others' hold, in whatever order the store sees them.
		var wg sync.WaitGroup
		for range s.Burst {
			wg.Go(func() { w.step(th, s) })
		}
		wg.Wait()
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
}

// shortWait returns, one time in six, a wait of 0 to 5 ms instead of wait: a context that ends
// while the call's request is on its way or its reply on the way back, as a caller under a
// request's deadline has. It draws on a stream of its own (r), so that the draws of the
// thread's planner, and the schedules old seeds replay, stay as they were.
func shortWait(r *rand.Rand, wait time.Duration) time.Duration {
	if r.IntN(6) == 0 {
		return time.Duration(r.IntN(6)) * time.Millisecond
	}
	return wait
}

// badArgs reports whether a call with this TTL, renewal interval (0 for the default) and lock
// delay is invalid, as the contract says (WithTTL, WithRenewInterval, WithLockDelay): it must
// then fail with ErrInvalid, and a call that is not must not (checker l).
func badArgs(ttl, renew, delay time.Duration) bool {
	if ttl < fencelock.MinTTL || ttl%time.Millisecond != 0 {
		return true
	}
	if delay > 0 && ttl-drift(ttl+delay) < ttl/2 {
		return true // the drift allowance counts on the TTL and the delay together
	}
	if renew == 0 {
		return false
	}
	return renew > (ttl-drift(ttl))/2 || renew < max(ttl/100, fencelock.MinRenewInterval)
}

func (w *nemesisWorker) options(s stepPlan, ttl time.Duration) []fencelock.Option {
	opts := []fencelock.Option{fencelock.WithTTL(ttl), fencelock.WithWatchdog(s.Watchdog)}
	if s.Renew > 0 && ttl == s.TTL {
		opts = append(opts, fencelock.WithRenewInterval(s.Renew))
	}
	if s.MaxHold > 0 {
		opts = append(opts, fencelock.WithMaxHold(s.MaxHold))
	}
	if s.MinHold > 0 {
		opts = append(opts, fencelock.WithMinHold(s.MinHold))
	}
	if s.Delay > 0 {
		opts = append(opts, fencelock.WithLockDelay(s.Delay))
	}
	return opts
}

// step obtains the lock as s says, does s's actions while holding it, and releases it.
func (w *nemesisWorker) step(th int, s stepPlan) {
	opts := w.options(s, s.TTL)
	if s.Owner != "" {
		opts = append(opts, fencelock.WithOwner(s.Owner))
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "waiting"})
	ctx, cancel := context.WithTimeout(context.Background(), s.Wait)
	g := grantOf{Op: s.Op, Name: s.Name, TTL: s.TTL, Watchdog: s.Watchdog, Bad: badArgs(s.TTL, s.Renew, s.Delay), MaxHold: s.MaxHold, MinHold: s.MinHold, Delay: s.Delay}
	lock, h := w.obtain(ctx, g, func(ctx context.Context) (*fencelock.Lock, error) {
		if s.Op == "try" {
			return w.client().TryObtain(ctx, s.Name, opts...)
		}
		return w.client().Obtain(ctx, s.Name, opts...)
	})
	cancel()
	if lock == nil {
		w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
		return
	}
	holding := "holding"
	if slices.Contains(w.cfg.Groups, s.Owner) {
		holding = "holding-shared" // an owner other workers share: see pauseWorker
	}
	w.hold(th, lock, h, s, holding)
}

// hold reports the thread in state while it does s's actions on lock, until the run ends, and
// then releases lock.
func (w *nemesisWorker) hold(th int, lock *fencelock.Lock, h int64, s stepPlan, state string) {
	w.out.emit(nemEvent{K: "state", Th: th, State: state})
	for _, a := range s.Actions {
		if time.Now().After(w.until) {
			break
		}
		w.act(lock, h, s, a)
	}
	w.out.emit(nemEvent{K: "state", Th: th, State: "releasing"})
	w.release(lock, h, s.Release)
	w.out.emit(nemEvent{K: "state", Th: th, State: "idle"})
}

func (w *nemesisWorker) act(lock *fencelock.Lock, h int64, s stepPlan, a action) {
	switch a.Kind {
	case "write":
		w.write(lock, h)
	case "idle":
		time.Sleep(a.D) // nothing polls the lock meanwhile: only its own timer can end it
	case "refresh":
		ctx, cancel := context.WithTimeout(context.Background(), a.D)
		start := time.Now()
		err := lock.Refresh(ctx, a.TTL)
		ret := time.Now()
		dl, _ := ctx.Deadline()
		cancel()
		// The hold's renewal interval is the one its first grant asked for: this step's, unless
		// another call of a shared owner made the hold (checker l allows for that).
		w.out.emit(w.reported(nemEvent{K: "call", Op: "refresh", L: h, Name: s.Name, Owner: lock.Owner(), Tok: lock.Token(), TTL: a.TTL,
			Start: start.UnixNano(), Ret: ret.UnixNano(), Dl: dl.UnixNano(), Class: errClass(err), Err: errText(err), Valid: lock.ValidUntil().UnixNano(),
			Bad: badArgs(a.TTL, s.Renew, s.Delay)}))
	case "reenter":
		ctx, cancel := context.WithTimeout(lock.Context(), a.D)
		renew := time.Duration(0)
		if a.TTL == s.TTL {
			renew = s.Renew // see options
		}
		g := grantOf{Op: "reenter", Name: s.Name, TTL: a.TTL, Watchdog: s.Watchdog, Bad: badArgs(a.TTL, renew, s.Delay), MaxHold: s.MaxHold, MinHold: s.MinHold, Delay: s.Delay}
		inner, ih := w.obtain(ctx, g, func(ctx context.Context) (*fencelock.Lock, error) {
			return w.client().Obtain(ctx, s.Name, w.options(s, a.TTL)...)
		})
		cancel()
		if inner != nil {
			w.write(inner, ih)
			w.release(inner, ih, s.Release)
		}
	}
}

// grantOf is what an acquisition asks for, as its event reports it.
type grantOf struct {
	Op       string
	Name     string
	TTL      time.Duration
	Watchdog bool
	Weight   int  // a permit's weight: 0 or 1 for one, fencelock.RWReaders for a write lock
	Limit    int  // a semaphore's limit; 0 for a lock or a read-write lock
	Bad      bool // see badArgs
	// The lease policy asked for (stepPlan's)
	MaxHold, MinHold, Delay time.Duration
}

// obtain runs one acquisition and reports it, with the owner it went under even when it failed
// (the observer tells it); a granted lock gets a handle number and a watcher of its Done
// channel.
func (w *nemesisWorker) obtain(ctx context.Context, g grantOf, call func(context.Context) (*fencelock.Lock, error)) (*fencelock.Lock, int64) {
	lock, h, _ := w.obtainErr(ctx, g, call)
	return lock, h
}

// obtainErr is obtain, with the call's error.
func (w *nemesisWorker) obtainErr(ctx context.Context, g grantOf, call func(context.Context) (*fencelock.Lock, error)) (*fencelock.Lock, int64, error) {
	ctx, tag := tagCall(ctx)
	start := time.Now()
	lock, err := call(ctx)
	ret := time.Now()
	dl, _ := ctx.Deadline()
	e := nemEvent{K: "fail", Op: g.Op, Name: g.Name, TTL: g.TTL, Start: start.UnixNano(), Ret: ret.UnixNano(), Dl: dl.UnixNano(), Class: errClass(err), Err: errText(err),
		Limit: g.Limit, Bad: g.Bad, MaxHold: g.MaxHold, MinHold: g.MinHold, Delay: g.Delay}
	if err != nil {
		e.Owner, _, _ = tag.get()
		w.out.emit(w.reported(e))
		return nil, 0, err
	}
	h := w.seq.Add(1)
	e.K, e.L, e.Owner, e.Tok, e.Count, e.Valid = "grant", h, lock.Owner(), lock.Token(), lock.HoldCount(), lock.ValidUntil().UnixNano()
	e.NoWatchdog = !g.Watchdog
	if g.Weight > 1 {
		e.Weight = g.Weight
	}
	if w.broken["fake-token"] {
		e.Tok -= 1_000_000_000_000
	}
	done := lock.Context().Done()
	w.out.emit(w.reported(e))
	w.watch.Go(func() { w.watchDone(lock, h, done) })
	if w.broken["self-delete"] && g.TTL >= spuriousMinTTL && w.b.deleteOwn != nil {
		w.b.deleteOwn(g.Name)
	}
	return lock, h, nil
}

// reported applies the broken modes that misreport a call.
func (w *nemesisWorker) reported(e nemEvent) nemEvent {
	if w.broken["late-return"] {
		e.Dl = e.Start
	}
	return e
}

// watchDone reports when the handle's Done channel closed and the validity deadline then.
func (w *nemesisWorker) watchDone(lock *fencelock.Lock, h int64, done <-chan struct{}) {
	<-done
	at := time.Now()
	if w.broken["late-done"] {
		if v := lock.ValidUntil(); v.After(at) {
			at = v
		}
		at = at.Add(3 * DoneSlack)
	}
	err := lock.Context().Err()
	w.out.emit(nemEvent{K: "done", L: h, Name: lock.Name(), Owner: lock.Owner(), Tok: lock.Token(), Ret: at.UnixNano(), Valid: lock.ValidUntil().UnixNano(),
		Lost: errors.Is(err, fencelock.ErrLost) && !errors.Is(err, fencelock.ErrClosed), Err: errText(err)})
}

// stallTick is how often watchStalls looks at the clock, and stallMin the lateness of a look
// it reports as a stall. Lateness under stallMin is not counted, and adds up: a call of
// several round trips on a machine that keeps the worker waiting 10 to 25 ms at each wake-up
// returned 114 ms past its deadline with none of it counted (Redlock, two busy loops beside the
// suite, seed 189094297).
const (
	stallTick = 5 * time.Millisecond
	stallMin  = 10 * time.Millisecond
)

// watchStalls records, until quiet is closed (the threads' last calls, which may end after the
// run's end, are over), the stretches in which this process ran none of its
// goroutines: a timer due every stallTick that fires more than stallMin late. On a loaded
// 2-core machine a race-instrumented process can be kept off the CPU (or stopped by its
// collector) for a hundred milliseconds; the checkers count such a stall like a SIGSTOP of the
// worker, which the library cannot see either. A goroutine of the library that blocks does not
// delay this one: it is a stall of the process only.
func (w *nemesisWorker) watchStalls(quiet <-chan struct{}) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-quiet:
			return
		case <-t.C:
		}
		now := time.Now() // not the tick's time: the delay before this goroutine ran counts
		if late := now.Sub(last) - stallTick; late > stallMin {
			w.out.emit(nemEvent{K: "stall", Start: last.Add(stallTick).UnixNano(), Ret: now.UnixNano()})
		}
		last = now
	}
}

// write makes a stamped write to the fenced store if the lock is valid right before it.
func (w *nemesisWorker) write(lock *fencelock.Lock, h int64) {
	w.writeIf(lock.Valid, lock.Name(), lock.Owner(), lock.Token(), h)
}

// writeIf makes a write to the fenced store stamped with tok if valid says yes right before it.
func (w *nemesisWorker) writeIf(valid func() error, name, owner string, tok, h int64) {
	t0 := time.Now()
	if err := valid(); err != nil && !w.broken["ignore-valid"] {
		return
	}
	req := nemWrite{Name: name, Owner: owner, Worker: w.cfg.ID, Token: tok, T0: t0.UnixNano(), Unfenced: w.broken["unfenced"]}
	var reply nemWriteReply
	class := "refused"
	if err := call(context.Background(), w.hc, w.cfg.Store+"/write", req, &reply); err != nil {
		class = "error"
	} else if reply.Accepted {
		class = "accepted"
	}
	w.out.emit(nemEvent{K: "write", L: h, Name: req.Name, Owner: req.Owner, Tok: req.Token, Start: req.T0, Ret: time.Now().UnixNano(), Class: class})
}

func (w *nemesisWorker) release(lock *fencelock.Lock, h int64, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := lock.Release(ctx)
	ret := time.Now()
	dl, _ := ctx.Deadline()
	w.out.emit(w.reported(nemEvent{K: "call", Op: "release", L: h, Name: lock.Name(), Owner: lock.Owner(), Tok: lock.Token(),
		Start: start.UnixNano(), Ret: ret.UnixNano(), Dl: dl.UnixNano(), Class: errClass(err), Err: errText(err)}))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err.Error())
}
