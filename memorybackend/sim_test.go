package memorybackend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
)

// The deterministic simulation runs whole fencelock Clients over one memory Store inside a
// testing/synctest bubble: random operations of every primitive and random faults, all drawn
// from one seed, in virtual time. The Store is the scheduler: the calls that reach it at one
// moment of virtual time wait at its gate until every goroutine of the bubble is blocked, and
// the seed chooses which goes first. The checkers are exact, because time stands still while
// they look:
//
//   - never two believed-valid holders of a lock, a write lock or a leadership (Valid() nil at
//     the same instant), outside the instant a fault made the store forget the first;
//   - never more permits believed valid than the limit, a reader beside a writer, or permits of
//     two limits at once;
//   - a grant's token above every token granted to another owner before its call began;
//   - no other owner granted a lock before the WithMinHold of a lock released early has
//     passed, and no lock believed valid past its WithMaxHold (locks drawn with a
//     WithLockDelay too, under the checkers above);
//   - Done closed by the validity deadline;
//   - every call back by its context's deadline plus the README's slack;
//   - no goroutine left once every Client closed (synctest fails the test otherwise).
//
// What cannot be modelled in a bubble: a paused process (SIGSTOP stops its timers too, and
// nothing in a bubble can stop one goroutine's clock). A pause between a holder's check and its
// act is modelled as a sleep between Valid() and the write, and a pause of a whole Client as a
// Partition of its Backend, whose renewals then fail until its validity ends by its own clock.
// Clock drift is modelled by Clients whose clocks run 0.2% fast or slow.

// simSlack is how long past its context's deadline a call may return (README: 100 ms).
const simSlack = 100 * time.Millisecond

// simConfig is one run of the simulation.
type simConfig struct {
	seed    uint64
	ops     int // operations to run, over every worker
	clients int
	workers int // per Client
	// done, when set, counts the operations run, across runs: a failing run ends its test
	// (synctest fails it at once), so the count is read in a clean-up.
	done *atomic.Int64
}

// sim is one run.
type sim struct {
	t     *testing.T
	cfg   simConfig
	store *Store
	gate  *simGate

	clientsMu sync.Mutex
	clients   []*fencelock.Client // by index; replaced when closed
	backends  []*Backend
	clocks    []func() time.Time

	ops atomic.Int64

	// lockOps is what the store did with locks (Store.traced), for the dump; the store's mu
	// guards it.
	lockOps []lockOp

	mu       sync.Mutex // guards what follows
	log      []simEntry
	live     map[*fencelock.Lock]*simHandle
	grants   map[string][]simGrant // by class/name
	faults   map[string]time.Time  // the last store fault of each name
	terms    map[int64]time.Time   // the election's tokens the store granted, and when
	floors   map[string]simFloor   // by name: the last lock released before its WithMinHold passed
	policy   map[simHoldKey]*simPolicy
	findings []string
	firstAt  time.Duration // when the first finding was made

	// releasing counts the releases of a hold on their way, and slipped says one of those
	// that overlapped failed: which of them was the Client's last is not known here.
	releasing map[simHoldKey]int
	slipped   map[simHoldKey]bool
}

type simEntry struct {
	at     time.Duration
	worker int // -1 for the fault loop
	seq    int
	text   string
}

// String is the entry as the log and the dump show it.
func (e simEntry) String() string {
	if e.worker < 0 {
		return fmt.Sprintf("%v store %s", e.at, e.text)
	}
	return fmt.Sprintf("%v w%d %s", e.at, e.worker, e.text)
}

// String is op as the dump shows it: "take l2 by o hold h ttl 1s: ok; holder o token 7 count 2 for 990ms".
func (op lockOp) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s by %.12s", op.kind, op.name, op.owner)
	if op.hold != "" {
		fmt.Fprintf(&b, " hold %s", op.hold)
	}
	if op.ttl > 0 {
		fmt.Fprintf(&b, " ttl %v", op.ttl)
	}
	if op.refresh {
		fmt.Fprintf(&b, " refresh of %d holds", op.holds)
	}
	if op.err != nil {
		fmt.Fprintf(&b, ": %v", op.err)
	} else {
		b.WriteString(": ok")
	}
	if op.holder == "" {
		b.WriteString("; free")
	} else {
		fmt.Fprintf(&b, "; holder %.12s token %d count %d for %v", op.holder, op.token, op.count, op.expires.Sub(op.at))
	}
	return b.String()
}

// simHandle is a lock handle a worker holds: what the checkers need of it.
type simHandle struct {
	class  string // "lock", "permit", "rw", "leader"
	name   string
	limit  int
	weight int
	lock   *fencelock.Lock
	client int
	// reentry: a hold added to its owner's (a count above 1); forgotten: a store fault made
	// the store forget its lock while it was held, so that until its holder learns it (at once
	// when the loss is pushed, at its next renewal otherwise) an overlap is the documented one.
	reentry, forgotten bool
	granted            time.Time // when the call that made it began
	ret                time.Time // when that call returned
}

// simFloor is a lock released before its minimum hold passed: no other owner may be granted
// its name before until.
type simFloor struct {
	owner          string
	granted, until time.Time
}

// simPolicy is what a hold's handles asked of its length. The latest-ending minimum hold: d,
// granted by a call that began at granted. The cap is the hold's first handle's, which the sim
// cannot tell among handles granted at once: capped says every handle asked for one, and
// capAt is the latest of their ends, counted from the grant's return.
type simPolicy struct {
	granted time.Time
	d       time.Duration
	capped  bool
	capAt   time.Time
}

// simHoldKey names one Client's hold of a lock: its handles' minimum holds keep it, whichever
// of them is released last.
type simHoldKey struct {
	client int
	owner  string
	token  int64
}

type simGrant struct {
	owner      string
	token      int64
	start, ret time.Time
}

// simTrace, when set, receives the gate's picks of the next run.
var simTrace *[]string

// simLabel is the context key of a worker's operation label: the gate orders calls by it.
type simLabel struct{}

// simGate orders the calls that reach the Store at one moment of virtual time.
type simGate struct {
	rng     *rand.Rand
	mu      sync.Mutex
	pending []*simCall
	notify  chan struct{}
	stop    chan struct{}
	done    chan struct{}
	trace   *[]string // when set, every pick, for finding where two runs part
}

type simCall struct {
	key string
	go_ chan struct{}
}

func (g *simGate) enter(ctx context.Context, b *Backend, op, name string) {
	label, _ := ctx.Value(simLabel{}).(string)
	id := 0 // the store's own: an expiry, a pushed loss
	if b != nil {
		id = b.id
	}
	c := &simCall{key: fmt.Sprintf("%04d %s %s %s", id, label, op, name), go_: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.mu.Unlock()
	select {
	case g.notify <- struct{}{}:
	default:
	}
	<-c.go_
}

// run lets the calls through one at a time: once every other goroutine is blocked, the seed
// picks one of those waiting, in the order of their keys.
func (g *simGate) run() {
	defer close(g.done)
	for {
		synctest.Wait()
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.mu.Unlock()
			select {
			case <-g.notify:
				continue
			case <-g.stop:
				return
			}
		}
		slices.SortStableFunc(g.pending, func(a, b *simCall) int { return cmp.Compare(a.key, b.key) })
		i := g.rng.IntN(len(g.pending))
		c := g.pending[i]
		if g.trace != nil {
			keys := make([]string, len(g.pending))
			for j, p := range g.pending {
				keys[j] = p.key
			}
			*g.trace = append(*g.trace, fmt.Sprintf("%v pick %q of %q", time.Since(simEpoch), c.key, keys))
		}
		g.pending = slices.Delete(g.pending, i, i+1)
		g.mu.Unlock()
		close(c.go_)
	}
}

// runSim runs one simulation in a bubble, and returns its log and how many operations it ran.
func runSim(t *testing.T, cfg simConfig) (log []string, ops int64) {
	synctest.Test(t, func(t *testing.T) {
		s := &sim{t: t, cfg: cfg, store: New(), live: map[*fencelock.Lock]*simHandle{}, grants: map[string][]simGrant{}, faults: map[string]time.Time{}, terms: map[int64]time.Time{},
			floors: map[string]simFloor{}, policy: map[simHoldKey]*simPolicy{}, releasing: map[simHoldKey]int{}, slipped: map[simHoldKey]bool{}}
		s.gate = &simGate{rng: rand.New(rand.NewPCG(cfg.seed, 1)), notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), trace: simTrace}
		if os.Getenv("FENCELOCK_SIM_DUMP") != "" && s.gate.trace == nil {
			s.gate.trace = new([]string)
		}
		s.store.gate = s.gate.enter
		s.store.traced = func(op lockOp) { s.lockOps = append(s.lockOps, op) }
		s.store.issued = func(name string, token int64) {
			if name == simElection {
				s.mu.Lock()
				s.terms[token] = time.Now()
				s.mu.Unlock()
			}
		}
		go s.gate.run()
		start := time.Now()
		for i := range cfg.clients {
			rate := []float64{1, 1, 0.998, 1.002}[i%4]
			s.clocks = append(s.clocks, func() time.Time { return start.Add(time.Duration(float64(time.Since(start)) * rate)) })
			s.clients = append(s.clients, nil)
			s.backends = append(s.backends, nil)
			s.newClient(i)
		}
		var workers, faults sync.WaitGroup
		done := make(chan struct{})
		faults.Go(func() { s.faultLoop(rand.New(rand.NewPCG(cfg.seed, 2)), done) })
		for i := range cfg.clients * cfg.workers {
			workers.Go(func() { s.worker(i, rand.New(rand.NewPCG(cfg.seed, uint64(100+i)))) })
		}
		workers.Wait()
		close(done)
		faults.Wait()
		s.clientsMu.Lock()
		for _, c := range s.clients {
			_ = c.Close()
		}
		s.clientsMu.Unlock()
		close(s.gate.stop)
		<-s.gate.done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, f := range s.findings {
			t.Error(f)
		}
		// A finding logs what led to it, unless FENCELOCK_SIM_DUMP=off: a failure met once in
		// a full run may not come back when its seed is run again (see TestSimulationReplays).
		if name := cmp.Or(os.Getenv("FENCELOCK_SIM_DUMP"), "auto"); name != "off" && len(s.findings) > 0 {
			if name == "auto" {
				// The name the first finding is about: "lock/l0: ..." or "lock l0: ...".
				if m := simFindingName.FindStringSubmatch(s.findings[0]); m != nil {
					name = m[1]
				}
			}
			s.dump(t, name)
		}
		slices.SortStableFunc(s.log, func(a, b simEntry) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.worker, b.worker), cmp.Compare(a.seq, b.seq))
		})
		for _, e := range s.log {
			log = append(log, e.String())
		}
		ops = s.ops.Load()
	})
	return log, ops
}

// simFindingName finds the name a finding is about.
var simFindingName = regexp.MustCompile(`(?:lock|permit|rw|leader)[ /](\w+)`)

// dump logs what the run did with name in the 5 seconds before its first finding (a minimum
// hold reaches 3 s back), with the gate's picks when they were traced (simTrace, or any
// FENCELOCK_SIM_DUMP set): FENCELOCK_SIM_DUMP=<name> asks for name, auto (the default) for the
// name of the first finding. s.mu is held.
func (s *sim) dump(t *testing.T, name string) {
	end := s.firstAt
	var lines []simEntry
	for _, e := range s.log {
		if e.at >= end-5*time.Second && e.at <= end && strings.Contains(e.text, " "+name+" ") {
			lines = append(lines, e)
		}
	}
	// What the store did with the name meanwhile, merged in: the run is over, the store idle.
	for _, op := range s.lockOps {
		if at := op.at.Sub(simEpoch); op.name == name && at >= end-5*time.Second && at <= end {
			lines = append(lines, simEntry{at: at, worker: -1, text: op.String()})
		}
	}
	slices.SortStableFunc(lines, func(a, b simEntry) int { return cmp.Compare(a.at, b.at) })
	for _, e := range lines {
		t.Log(e)
	}
	if s.gate.trace == nil {
		return
	}
	for _, p := range *s.gate.trace {
		at, rest, _ := strings.Cut(p, " pick ")
		d, _ := time.ParseDuration(at)
		if key, _, _ := strings.Cut(rest, " of "); d >= end-5*time.Second && d <= end && strings.Contains(key, name) {
			t.Logf("gate: %s %s", at, key)
		}
	}
}

// newClient makes client i anew, on a Backend of its own.
func (s *sim) newClient(i int) {
	b := s.store.Backend()
	b.now = s.clocks[i] // the process's clock: its Elapsed is measured on it
	var mu sync.Mutex
	gaveUp := map[string]bool{} // owners whose clean-up the closed Client could not do
	c := fencelock.New(b, fencelock.WithClock(s.clocks[i]), fencelock.WithObserver(func(e fencelock.Event) {
		switch {
		case e.Kind == fencelock.EventCleanup && errors.Is(e.Err, fencelock.ErrClosed):
			mu.Lock()
			gaveUp[e.Owner] = true
			mu.Unlock()
		case e.Kind == fencelock.EventNotObtained && errors.Is(e.Err, fencelock.ErrClosed) && !strings.HasPrefix(e.Owner, "shared-"):
			mu.Lock()
			left := gaveUp[e.Owner]
			mu.Unlock()
			if !left {
				s.checkLeftNothing(e.Name, e.Owner, e.Err)
			}
		}
	}))
	s.clientsMu.Lock()
	s.clients[i], s.backends[i] = c, b
	s.clientsMu.Unlock()
}

// checkLeftNothing checks that the store holds nothing of name for owner, a call's own owner
// that the call's Client, closed meanwhile, failed with ErrClosed: what the store granted it
// (the lock came to it in line) was released before the call returned, or the name would be
// held by no one until its TTL ran out.
func (s *sim) checkLeftNothing(name, owner string, err error) {
	s.store.mu.Lock()
	now := time.Now()
	class := ""
	if e := s.store.names[name]; e != nil {
		if p := permitOf(e, owner); p != nil && now.Before(p.expires) {
			class = "permit"
		}
		if e.lock != nil && e.lock.owner == owner && now.Before(e.lock.expires) {
			class = "lock"
		}
	}
	s.store.mu.Unlock()
	if class == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.live {
		if l.Owner() == owner {
			return // a re-entry: the owner's first hold keeps it, and Close releases that
		}
	}
	s.flag("%s/%s: a call that failed with ErrClosed left its owner %.6s holding it: %v", class, name, owner, err)
}

// replaceClient makes client i anew if it is still c, and reports whether it did.
func (s *sim) replaceClient(i int, c *fencelock.Client) bool {
	s.clientsMu.Lock()
	now := s.clients[i]
	s.clientsMu.Unlock()
	if now != c {
		return false // another worker replaced it already
	}
	s.newClient(i)
	return true
}

func (s *sim) client(i int) (*fencelock.Client, *Backend) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	return s.clients[i], s.backends[i]
}

func (s *sim) flag(format string, args ...any) {
	if len(s.findings) == 0 {
		s.firstAt = s.elapsed()
	}
	if len(s.findings) < 20 {
		s.findings = append(s.findings, fmt.Sprintf("seed %d at %v: ", s.cfg.seed, s.elapsed())+fmt.Sprintf(format, args...))
	}
}

var simEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (s *sim) elapsed() time.Duration { return time.Since(simEpoch) }

func (s *sim) record(worker, seq int, format string, args ...any) {
	s.mu.Lock()
	s.log = append(s.log, simEntry{at: s.elapsed(), worker: worker, seq: seq, text: fmt.Sprintf(format, args...)})
	s.mu.Unlock()
}

// Names: three locks, a semaphore, a read-write lock and an election.
var (
	simLocks = []string{"l0", "l1", "l2"}
	simTTLs  = []time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 200 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second}
	// simHolds are the minimum and maximum holds drawn (a maximum is never the shortest).
	simHolds = []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second}
	simWaits = []time.Duration{500 * time.Microsecond, 5 * time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, 3 * time.Second}
)

const (
	simSem      = "s0"
	simRW       = "rw0"
	simElection = "e0"
	simLimit    = 3
)

// worker runs operations until the run has run its count.
func (s *sim) worker(id int, r *rand.Rand) {
	ci := id % s.cfg.clients
	owners := []string{fmt.Sprintf("shared-%d", ci), "shared-all"}
	budget := s.cfg.ops / (s.cfg.clients * s.cfg.workers) // each worker's own: the count does not depend on who ran first
	for seq := 0; seq < budget; seq++ {
		s.ops.Add(1)
		if s.cfg.done != nil {
			s.cfg.done.Add(1)
		}
		label := fmt.Sprintf("w%d#%d", id, seq)
		ctx := context.WithValue(context.Background(), simLabel{}, label)
		c, _ := s.client(ci)
		var owner string
		if r.IntN(4) == 0 {
			owner = owners[r.IntN(len(owners))]
		}
		ttl := simTTLs[r.IntN(len(simTTLs))]
		wait := pick(r, simWaits)
		opts := []fencelock.Option{fencelock.WithTTL(ttl), fencelock.WithWatchdog(r.IntN(5) != 0)}
		if owner != "" {
			opts = append(opts, fencelock.WithOwner(owner))
		}
		switch n := r.IntN(100); {
		case n < 35:
			name := simLocks[r.IntN(len(simLocks))]
			try := r.IntN(3) == 0
			burst := 1
			if owner != "" && r.IntN(2) == 0 {
				burst = 2 + r.IntN(2) // goroutines of one process under one owner, at once
			}
			seed := r.Uint64()
			s.burst(burst, func(k int) {
				s.lockStep(withLabel(ctx, k), id, seq*10+k, c, ci, "lock", name, 0, 0, try, wait, opts, seed+uint64(k))
			})
		case n < 55:
			limit := simLimit
			if r.IntN(8) == 0 {
				limit++ // a caller that disagrees
			}
			w := 1 + r.IntN(2)
			try := r.IntN(3) == 0
			burst := 1
			if owner != "" && r.IntN(2) == 0 {
				burst = 2
			}
			seed := r.Uint64()
			popts := append(opts[:len(opts):len(opts)], fencelock.WithWeight(w))
			s.burst(burst, func(k int) {
				s.lockStep(withLabel(ctx, k), id, seq*10+k, c, ci, "permit", simSem, limit, w, try, wait, popts, seed+uint64(k))
			})
		case n < 72:
			w := 1
			if r.IntN(3) == 0 {
				w = fencelock.RWReaders
			}
			s.lockStep(ctx, id, seq, c, ci, "rw", simRW, fencelock.RWReaders, w, r.IntN(3) == 0, wait, opts, r.Uint64())
		case n < 88:
			s.lockStep(ctx, id, seq, c, ci, "leader", simElection, 0, 0, false, wait, opts[:2], r.Uint64())
		case n < 95:
			s.leadStep(ctx, id, seq, c, ci, wait, opts[:2], r.Uint64())
		case n < 97:
			if s.replaceClient(ci, c) {
				_ = c.Close() // with whatever its other workers hold
				s.record(id, seq, "close client %d", ci)
			}
		case n < 99:
			s.observeStep(ctx, id, seq, c, pick(r, simWaits))
		default:
			time.Sleep(pick(r, simWaits))
		}
	}
}

// observeStep watches the election for d: every term Observe reports is one a leader was
// granted, and the terms never go back.
func (s *sim) observeStep(ctx context.Context, worker, seq int, c *fencelock.Client, d time.Duration) {
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	seen, err := c.Election(simElection).Observe(octx)
	if err != nil {
		s.record(worker, seq, "observe: %s", outcome(err))
		return
	}
	var top int64
	n := 0
	for l := range seen {
		n++
		if !l.Elected {
			continue
		}
		s.mu.Lock()
		if _, ok := s.terms[l.Term]; !ok {
			s.flag("Observe reported term %d, which the store never granted", l.Term)
		}
		if l.Term < top {
			s.flag("Observe reported term %d after term %d", l.Term, top)
		}
		s.mu.Unlock()
		top = max(top, l.Term)
	}
	s.record(worker, seq, "observe: reported %d", n)
}

// pick draws one of ds, with a jitter of up to a millisecond, in nanoseconds: two things the
// seed drew seldom fall on the same instant of virtual time, where the order in which the
// runtime wakes goroutines, which no seed controls, would decide between them.
func pick(r *rand.Rand, ds []time.Duration) time.Duration {
	return ds[r.IntN(len(ds))] + jitter(r)
}

func jitter(r *rand.Rand) time.Duration { return time.Duration(r.IntN(int(time.Millisecond))) }

// withLabel is ctx with its label marked as the k-th goroutine of a burst, so that the gate
// orders the burst's calls by k, not by which goroutine ran first.
func withLabel(ctx context.Context, k int) context.Context {
	label, _ := ctx.Value(simLabel{}).(string)
	return context.WithValue(ctx, simLabel{}, label+"/"+strconv.Itoa(k))
}

// burst runs fn in n goroutines at once (n = 1: in this one).
func (s *sim) burst(n int, fn func(k int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { fn(k) })
	}
	wg.Wait()
}

// lockStep takes a lock, a permit, a read or write lock, or a leadership, does a few things
// while it holds it, and releases it.
func (s *sim) lockStep(ctx context.Context, worker, seq int, c *fencelock.Client, ci int, class, name string, limit, weight int, try bool, wait time.Duration, opts []fencelock.Option, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0))
	var minHold, maxHold time.Duration
	if class == "lock" {
		// Lease policy, from a stream of its own: the other draws stay as they were.
		p := rand.New(rand.NewPCG(seed, 1))
		if p.IntN(6) == 0 {
			minHold = simHolds[p.IntN(len(simHolds))]
		}
		if p.IntN(6) == 0 {
			maxHold = simHolds[1+p.IntN(len(simHolds)-1)]
		}
		if maxHold > 0 && minHold > maxHold {
			minHold = 0
		}
		opts = append(opts[:len(opts):len(opts)], fencelock.WithMinHold(minHold), fencelock.WithMaxHold(maxHold))
		if d := simHolds[p.IntN(len(simHolds))]; p.IntN(8) == 0 {
			// The store keeps the lock this much past the Client's trust: the checkers of
			// believed-valid holders see its trust, the store's grants its TTL. (A delay too
			// long for the TTL is refused: bad input the sim draws too.)
			opts = append(opts, fencelock.WithLockDelay(d))
		}
	}
	obtain := func(ctx context.Context) (*fencelock.Lock, error) {
		switch {
		case class == "lock" && try:
			return c.TryObtain(ctx, name, opts...)
		case class == "lock":
			return c.Obtain(ctx, name, opts...)
		case class == "permit" && try:
			return c.Semaphore(name, limit).TryAcquire(ctx, opts...)
		case class == "permit":
			return c.Semaphore(name, limit).Acquire(ctx, opts...)
		case class == "rw" && weight > 1 && try:
			return c.RWLock(name).TryLock(ctx, opts...)
		case class == "rw" && weight > 1:
			return c.RWLock(name).Lock(ctx, opts...)
		case class == "rw" && try:
			return c.RWLock(name).TryRLock(ctx, opts...)
		case class == "rw":
			return c.RWLock(name).RLock(ctx, opts...)
		}
		l, err := c.Election(name, opts...).Campaign(ctx, fmt.Sprintf("w%d", worker))
		if err != nil {
			return nil, err
		}
		return l.Lock(), nil
	}
	lock := s.obtain(ctx, worker, seq, ci, class, name, limit, weight, wait, obtain)
	if lock == nil {
		return
	}
	if class == "lock" {
		s.mu.Lock()
		if h := s.live[lock]; h != nil {
			key := simHoldKey{ci, lock.Owner(), lock.Token()}
			p := s.policy[key]
			if p == nil {
				p = &simPolicy{capped: true}
				s.policy[key] = p
			}
			// Every hold's minimum counts: the hold ends no sooner than the latest.
			if minHold > 0 && h.granted.Add(minHold).After(p.granted.Add(p.d)) {
				p.granted, p.d = h.granted, minHold
			}
			if maxHold == 0 {
				p.capped = false
			} else if at := h.ret.Add(maxHold + maxHold/100 + 2*time.Millisecond); at.After(p.capAt) {
				p.capAt = at
			}
		}
		s.mu.Unlock()
	}
	for range 1 + r.IntN(3) {
		switch n := r.IntN(10); {
		case n < 4:
			time.Sleep(pick(r, simWaits[:len(simWaits)-1]))
		case n < 7:
			s.write(worker, seq, lock, pick(r, simWaits[:3]))
		case n < 9:
			rctx, cancel := context.WithTimeout(ctx, pick(r, simWaits))
			err := s.timed(rctx, worker, seq, "refresh "+name, func(ctx context.Context) error {
				return lock.Refresh(ctx, simTTLs[r.IntN(len(simTTLs))])
			})
			cancel()
			s.record(worker, seq, "refresh %s: %s", name, outcome(err))
		default:
			if class == "lock" || (class == "rw") {
				// A re-entry through the context (for a read-write lock: a read lock under
				// either, the downgrade when under the write lock).
				inner := s.obtain(lock.Context(), worker, seq+1000000, ci, class, name, limit, 1, wait, func(ctx context.Context) (*fencelock.Lock, error) {
					if class == "rw" {
						return c.RWLock(name).RLock(ctx, opts...)
					}
					return c.Obtain(ctx, name, opts...)
				})
				if inner != nil {
					s.release(worker, seq, inner, wait)
				}
			}
		}
	}
	s.release(worker, seq, lock, wait)
}

// leadStep runs Election.Lead with a function that writes with its term while its context
// lives, for a while, then returns.
func (s *sim) leadStep(ctx context.Context, worker, seq int, c *fencelock.Client, ci int, wait time.Duration, opts []fencelock.Option, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0))
	lctx, cancel := context.WithTimeout(ctx, wait+time.Duration(r.IntN(3000))*time.Millisecond+jitter(r))
	defer cancel()
	err := s.timed(lctx, worker, seq, "lead", func(lctx context.Context) error {
		return c.Election(simElection, opts...).Lead(lctx, fmt.Sprintf("w%d", worker), func(fctx context.Context, term int64) error {
			// The store's grant of the term: a store fault since then may have made it forget
			// the term while its reply was on its way (a delayed reply), before fn began.
			s.mu.Lock()
			granted, ok := s.terms[term]
			if !ok {
				s.flag("w%d: Lead ran fn with term %d, which the store never granted", worker, term)
				granted = time.Now()
			}
			s.mu.Unlock()
			s.record(worker, seq, "lead %s term %d: runs, granted at %v", simElection, term, granted.Sub(simEpoch))
			for range 1 + r.IntN(4) {
				if fctx.Err() != nil {
					return nil
				}
				// What a leader's work does: check its context, then act with its term.
				s.checkBelieved(fctx, "leader", simElection, term, worker, granted)
				time.Sleep(pick(r, simWaits[:3]))
			}
			return nil
		})
	})
	s.record(worker, seq, "lead: %s", outcome(err))
}

// obtain runs one acquisition under a context that ends after wait, checks and records it.
func (s *sim) obtain(ctx context.Context, worker, seq, ci int, class, name string, limit, weight int, wait time.Duration, call func(context.Context) (*fencelock.Lock, error)) *fencelock.Lock {
	octx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	var lock *fencelock.Lock
	err := s.timed(octx, worker, seq, "obtain "+name, func(ctx context.Context) error {
		var err error
		lock, err = call(ctx)
		return err
	})
	if err != nil {
		s.record(worker, seq, "%s %s limit %d weight %d: %s", class, name, limit, weight, outcome(err))
		return nil
	}
	h := &simHandle{class: class, name: name, limit: limit, weight: max(weight, 1), lock: lock, client: ci, reentry: lock.HoldCount() > 1, granted: start, ret: time.Now()}
	s.mu.Lock()
	s.checkGrant(h, start)
	s.live[lock] = h
	s.mu.Unlock()
	s.record(worker, seq, "%s %s limit %d weight %d: granted token %d count %d", class, name, limit, weight, lock.Token(), lock.HoldCount())
	clock := s.clocks[ci]
	go func() {
		<-lock.Context().Done()
		if now, until := clock(), lock.ValidUntil(); now.After(until.Add(time.Millisecond)) {
			s.mu.Lock()
			s.flag("%s %s: Done closed %v after the validity deadline, token %d count %d granted %v cause %v", class, name, now.Sub(until), lock.Token(), lock.HoldCount(), h.granted.Sub(simEpoch), context.Cause(lock.Context()))
			s.mu.Unlock()
		}
	}()
	return lock
}

// timed runs call and checks that it returns by its context's deadline plus the slack.
func (s *sim) timed(ctx context.Context, worker, seq int, what string, call func(context.Context) error) error {
	dl, ok := ctx.Deadline()
	err := call(ctx)
	if now := time.Now(); ok && now.After(dl.Add(simSlack)) {
		s.mu.Lock()
		s.flag("w%d#%d %s returned %v after its deadline: %v", worker, seq, what, now.Sub(dl), err)
		s.mu.Unlock()
	}
	return err
}

// release releases lock under a context that ends after wait.
func (s *sim) release(worker, seq int, lock *fencelock.Lock, wait time.Duration) {
	s.mu.Lock()
	h := s.live[lock]
	delete(s.live, lock)
	if h != nil && h.class == "lock" {
		s.releasing[simHoldKey{h.client, lock.Owner(), lock.Token()}]++
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := s.timed(ctx, worker, seq, "release "+lock.Name(), lock.Release)
	s.record(worker, seq, "release %s token %d: %s", lock.Name(), lock.Token(), outcome(err))
	if h != nil && h.class == "lock" {
		s.mu.Lock()
		s.released(h, err)
		s.mu.Unlock()
	}
}

// released records the release of h, which returned err: when it was the last handle of its
// Client's hold, released cleanly before the minimum hold of the hold's first handle passed,
// the name is another owner's no sooner than that minimum, less the drift of the Client's
// clock. Of releases that overlap, the last to return does this, and only if none of them
// failed: the one that ended the hold in the Client may be any of them. s.mu is held.
func (s *sim) released(h *simHandle, err error) {
	key := simHoldKey{h.client, h.lock.Owner(), h.lock.Token()}
	s.releasing[key]--
	if err != nil {
		s.slipped[key] = true
	}
	if s.releasing[key] > 0 {
		return // another release of the hold is on its way
	}
	slipped := s.slipped[key]
	delete(s.releasing, key)
	delete(s.slipped, key)
	for _, o := range s.live {
		if o.class == h.class && o.name == h.name && o.client == h.client && o.lock.Owner() == key.owner && o.lock.Token() == key.token {
			return // the hold lives on in another handle
		}
	}
	p := s.policy[key]
	delete(s.policy, key)
	if p == nil || p.d == 0 || slipped {
		return
	}
	if until := p.granted.Add(p.d); time.Now().Before(until) {
		s.floors[h.name] = simFloor{owner: key.owner, granted: p.granted, until: until.Add(-p.d/100 - 2*time.Millisecond)}
	}
}

// write is a holder's act: it checks the lock, pauses (the window a process pause opens), and
// acts; a checker looks at who believes itself valid at the check.
func (s *sim) write(worker, seq int, lock *fencelock.Lock, pause time.Duration) {
	if lock.Valid() != nil {
		return
	}
	s.mu.Lock()
	h := s.live[lock]
	s.mu.Unlock()
	if h != nil {
		s.checkBelieved(lock.Context(), h.class, h.name, lock.Token(), worker, h.granted)
		s.mu.Lock()
		if p := s.policy[simHoldKey{h.client, lock.Owner(), lock.Token()}]; p != nil && p.capped && lock.Valid() == nil && time.Now().After(p.capAt) {
			s.flag("w%d: %s token %d believed valid %v past the WithMaxHold cap of every handle of its hold", worker, h.name, lock.Token(), time.Since(p.capAt))
		}
		s.mu.Unlock()
	}
	time.Sleep(pause)
}

// checkBelieved checks, at the moment a holder whose context is ctx acts, that no other
// owner's handle of an exclusive lock of name is believed valid too. A holder granted at
// granted whose lock a store fault has made the store forget since is the documented overlap.
func (s *sim) checkBelieved(ctx context.Context, class, name string, token int64, worker int, granted time.Time) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.faults[name]; ok && !at.Before(granted) {
		return
	}
	for _, h := range s.live {
		if h.class == class && h.name == name && h.lock.Token() != token && h.weight == exclusive(h) && !s.lostToFault(h) && h.lock.Valid() == nil && !s.excused(name) {
			s.flag("w%d acts on %s %s with token %d while token %d is believed valid", worker, class, name, token, h.lock.Token())
		}
	}
}

// exclusive is the weight of an exclusive hold of h's class.
func exclusive(h *simHandle) int {
	switch h.class {
	case "rw":
		return fencelock.RWReaders
	case "permit":
		return -1 // a permit is never exclusive
	}
	return 1
}

// lostToFault says a store fault may have made the store forget h's lock while h was held, or
// while the call that made it was on its way (a grant whose reply was delayed); s.mu is held.
func (s *sim) lostToFault(h *simHandle) bool {
	if h.forgotten {
		return true
	}
	at, ok := s.faults[h.name]
	return ok && !at.Before(h.granted)
}

// excused says a store fault made the store forget name at this very instant: its holder
// learns it at once (the loss is pushed), but a grant in the same instant may come first.
func (s *sim) excused(name string) bool {
	at, ok := s.faults[name]
	return ok && !time.Now().After(at)
}

// checkGrant checks a new grant against the handles believed valid and the grants before it;
// s.mu is held.
func (s *sim) checkGrant(g *simHandle, start time.Time) {
	owner, token := g.lock.Owner(), g.lock.Token()
	key := g.class + "/" + g.name
	for _, p := range s.grants[key] {
		// A re-entry (a count above 1) has the token of its owner's first hold.
		if g.lock.HoldCount() == 1 && p.owner != owner && p.ret.Before(start) && p.token >= token {
			s.flag("%s: token %d granted to a call that began after token %d of another owner was granted", key, token, p.token)
		}
	}
	if f, ok := s.floors[g.name]; ok && g.class == "lock" && f.owner != owner && time.Now().Before(f.until) {
		if at, faulted := s.faults[g.name]; !faulted || at.Before(f.granted) {
			s.flag("%s: token %d granted %v before the minimum hold of owner %.6s's lock, released early, passed", key, token, time.Until(f.until), f.owner)
		}
	}
	s.grants[key] = append(s.grants[key], simGrant{owner: owner, token: token, start: start, ret: time.Now()})
	if len(s.grants[key]) > 64 {
		s.grants[key] = s.grants[key][len(s.grants[key])-64:]
	}
	if s.excused(g.name) || s.lostToFault(g) || g.lock.Valid() != nil {
		return
	}
	// What every owner believes it holds, counted by owner: a permit's holds take the most
	// any of them asked for.
	// Limits are compared between first holds: a re-entry is its owner's one permit, taken
	// under the limit its first hold agreed to (a re-entry under another limit is refused).
	byOwner := map[string]int{owner: g.weight}
	limits := map[int]bool{}
	if !g.reentry {
		limits[g.limit] = true
	}
	for _, h := range s.live {
		if h.class != g.class || h.name != g.name || s.lostToFault(h) || h.lock.Valid() != nil {
			continue
		}
		o := h.lock.Owner()
		byOwner[o] = max(byOwner[o], h.weight)
		if !h.reentry {
			limits[h.limit] = true
		}
	}
	switch g.class {
	case "lock", "leader":
		if len(byOwner) > 1 {
			s.flag("%s: %d owners believe they hold it at once: token %d of client %d, and %v", key, len(byOwner), token, g.client, s.holders(g))
		}
	default:
		n, least := 0, 0
		for _, w := range byOwner {
			n += w
		}
		for l := range limits {
			if least == 0 || l < least {
				least = l
			}
		}
		if (least > 0 && n > least) || len(limits) > 1 {
			s.flag("%s: permits %v of limits %v believed valid at once: token %d weight %d of client %d, and %v", key, byOwner, limits, token, g.weight, g.client, s.holders(g))
		}
	}
}

// holders describes the handles believed valid of g's class and name; s.mu is held.
func (s *sim) holders(g *simHandle) []string {
	var who []string
	for _, h := range s.live {
		if h.class == g.class && h.name == g.name && h != g && !s.lostToFault(h) && h.lock.Valid() == nil {
			who = append(who, fmt.Sprintf("token %d weight %d count %d owner %.6s of client %d granted at %v valid until %v", h.lock.Token(), h.weight, h.lock.HoldCount(), h.lock.Owner(), h.client, h.granted.Sub(simEpoch), h.lock.ValidUntil().Sub(simEpoch)))
		}
	}
	return who
}

// faultLoop makes a fault every 20 ms to 2 s of virtual time until done is closed.
func (s *sim) faultLoop(r *rand.Rand, done <-chan struct{}) {
	for {
		t := time.NewTimer(time.Duration(20+r.IntN(2000))*time.Millisecond + jitter(r))
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
		_, b := s.client(r.IntN(s.cfg.clients))
		all := append(append([]string{}, simLocks...), simSem, simRW, simElection)
		name := all[r.IntN(len(all))]
		switch n := r.IntN(100); {
		case n < 20:
			s.forgot(name)
			s.store.Expire(name)
		case n < 30:
			s.store.mu.Lock()
			var owners []string
			if e := s.store.names[name]; e != nil {
				for _, p := range e.permits {
					owners = append(owners, p.owner)
				}
			}
			s.store.mu.Unlock()
			if len(owners) > 0 {
				slices.Sort(owners)
				s.forgot(name)
				s.store.ExpirePermit(name, owners[r.IntN(len(owners))])
			}
		case n < 35:
			s.forgot(name)
			s.store.ForgetName(name)
		case n < 37:
			for _, n := range all {
				s.forgot(n)
			}
			s.store.Forget()
		case n < 60:
			b.DropNextReply(r.IntN(2) == 0)
		case n < 75:
			b.DelayNextReply(pick(r, simWaits))
		default:
			b.Partition(pick(r, simWaits))
		}
	}
}

// forgot records that a fault is about to make the store forget name's holds.
func (s *sim) forgot(name string) {
	s.mu.Lock()
	s.faults[name] = time.Now()
	s.log = append(s.log, simEntry{at: s.elapsed(), worker: -1, text: "fault: the store forgets " + name + " (or a holder of it)"})
	for _, h := range s.live {
		if h.name == name {
			h.forgotten = true
		}
	}
	s.mu.Unlock()
}

func outcome(err error) string {
	var held *fencelock.HeldError
	var limit *fencelock.LimitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &limit):
		return "limit"
	case errors.As(err, &held):
		return "held"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "ctx"
	case errors.Is(err, fencelock.ErrNotHeld):
		return "not-held"
	case errors.Is(err, fencelock.ErrLost):
		return "lost"
	case errors.Is(err, fencelock.ErrClosed):
		return "closed"
	case errors.Is(err, fencelock.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, fencelock.ErrInvalid):
		return "invalid"
	}
	return "error"
}

// simSeed is the seed of a run: FENCELOCK_SIM_SEED, or one drawn now.
func simSeed(t *testing.T) uint64 {
	if v := os.Getenv("FENCELOCK_SIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FENCELOCK_SIM_SEED=%q: %v", v, err)
		}
		return seed
	}
	return rand.Uint64() % 1_000_000_000
}

// TestSimulation runs the simulation on a fresh seed for simCIOps operations (seed after seed
// for FENCELOCK_SIM_MINUTES minutes when set), and reports its rate and what its operations
// came to: a run in which nothing was granted, refused, cut short or lost tested nothing.
// FENCELOCK_SIM_SEED=<seed> replays one.
func TestSimulation(t *testing.T) {
	minutes, _ := strconv.ParseFloat(os.Getenv("FENCELOCK_SIM_MINUTES"), 64)
	end := time.Now().Add(time.Duration(minutes * float64(time.Minute)))
	seed := simSeed(t)
	var total int64
	var done atomic.Int64
	counts := map[string]int{}
	began := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("found in seed %d, after %d operations simulated in %v", seed, done.Load(), time.Since(began).Round(time.Millisecond))
		}
	})
	for first := true; first || time.Now().Before(end); first = false {
		cfg := simConfig{seed: seed, ops: simCIOps, clients: 3, workers: 3, done: &done}
		t.Logf("seed %d (FENCELOCK_SIM_SEED=%d replays it)", seed, seed)
		log, n := runSim(t, cfg)
		total += n
		for _, l := range log {
			if i := strings.LastIndex(l, ": "); i > 0 {
				if w := strings.Fields(l[i+2:]); len(w) > 0 {
					counts[w[0]]++
				}
			}
		}
		seed++
	}
	took := time.Since(began)
	t.Logf("%d operations simulated in %v: %.0f a second, %.0f a minute; outcomes %v", total, took.Round(time.Millisecond), float64(total)/took.Seconds(), float64(total)/took.Minutes(), counts)
	for _, o := range []string{"granted", "held", "limit", "ctx", "not-held", "closed"} {
		if counts[o] == 0 {
			t.Errorf("no operation came to %q: the simulation did not test it", o)
		}
	}
}

// The seeds that found something, with what: each runs in every test run.
var simRegressions = map[uint64]string{
	// A Refresh to a shorter TTL, sent as a Release of another hold of the same Client went
	// out, counted that hold among the caller's, and the store cut short the lock of another
	// Client under the same owner (shared-all): another owner got it while that Client still
	// trusted it.
	478017345: "Refresh beside a concurrent Release under an owner shared across Clients",
	// Bugs of the repository's history put back one at a time; each seed below is the first,
	// counting up from 1000, to catch one (the closing note of issue 28 has the figures):
	// - renewals and Refreshes that shorten a lock whatever holds it has (928a046, 9de46ea),
	//   and a retried release that ends a second hold (hold IDs): 1000;
	// - a Refresh to a shorter TTL whose outcome is unknown keeping the old deadline
	//   (1d16d20): 1002;
	// - a Refresh's deadline counted from its answer, not its send (5d2b4ca): 1007;
	// - a Refresh whose caller's holds were counted before it claimed the renewal (c768043):
	//   1120.
	// Seed 1000 also met, about once in 60 replays under load, a lost hold's undo that reached
	// the store before the Refresh it had on its way, which then cut short a lock the same
	// Client kept for its minimum hold (eaac701; TestMinHoldKeptBesideALostHoldsRefresh is its
	// deterministic form).
	1000: "renewals that shorten whatever holds; a retried release that ends another hold",
	1002: "an unknown shorter Refresh keeping the old deadline",
	1007: "a Refresh's deadline counted from its answer",
	1120: "a Refresh that counts the caller's holds before it claims the renewal",
	// A queued call held up before the store (the gate) ran at the time it began, handed a
	// lock that had expired meanwhile to the next in line with an expiry already past, and
	// the lock went on to another owner at once (found in a 4-minute run, December 2026; it
	// did not come back in 20 replays: TestQueuedCallRunsAtTheStoresTimeWhenItArrives is its
	// deterministic form).
	380911742: "a queued call run at the store's time of its start",
}

func TestSimulationRegressions(t *testing.T) {
	for seed, what := range simRegressions {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Log(what)
			runSim(t, simConfig{seed: seed, ops: simCIOps, clients: 3, workers: 3})
		})
	}
}

// simCIOps is how many operations a run of TestSimulation simulates.
const simCIOps = 20000

// A seed replays the same history: the logs of FENCELOCK_SIM_REPLAYS runs of it compare
// equal. Not every run does yet: goroutines the Client wakes at one instant of virtual time
// (its timers, its watchdog) run in an order no seed controls, and a few histories part
// there; the first pick where they part is reported. It runs when FENCELOCK_SIM_REPLAYS is set.
func TestSimulationReplays(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("FENCELOCK_SIM_REPLAYS"))
	if runs < 2 {
		t.Skip("FENCELOCK_SIM_REPLAYS=<runs> measures how many replays of a seed give the identical log")
	}
	seed := simSeed(t)
	cfg := simConfig{seed: seed, ops: 2000, clients: 3, workers: 3}
	var first, firstTrace []string
	same := 0
	for k := range runs {
		var trace []string
		simTrace = &trace
		log, _ := runSim(t, cfg)
		simTrace = nil
		if k == 0 {
			first, firstTrace = log, trace
			continue
		}
		if slices.Equal(first, log) {
			same++
			continue
		}
		for i := range min(len(firstTrace), len(trace)) {
			if firstTrace[i] != trace[i] {
				t.Logf("run %d parts from the first at the gate's pick %d: %s, not %s", k, i, trace[i], firstTrace[i])
				break
			}
		}
	}
	h := fnv.New64a()
	h.Write([]byte(strings.Join(first, "\n")))
	t.Logf("seed %d: %d of %d replays gave the first run's log (%d entries, hash %x)", seed, same, runs-1, len(first), h.Sum64())
	if same < runs-1 {
		t.Errorf("%d of %d replays of seed %d parted from the first run", runs-1-same, runs-1, seed)
	}
}
