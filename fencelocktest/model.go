package fencelocktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// RunModel runs seeded, sequential histories — one operation at a time, expiries by waiting —
// against the backend under test and against the memory store (package memorybackend), the
// model of every backend, and compares every result: granted or not and why, the hold count,
// which earlier grant a token repeats (a re-entry) or that it is new and above every token of
// the name before it, the permits in use and the waiters, who leads. A difference is a bug in
// one of them, or a difference of the backend's that the README's backend table lists (and
// Model names, so that the histories leave it out). FENCELOCK_MODEL_SEED replays one seed;
// FENCELOCK_MODEL_DEBUG=1 logs every step of both sides.
func RunModel(t *testing.T, target Target, m Model) {
	if m.Histories == 0 {
		m.Histories = 20
	}
	if m.Steps == 0 {
		m.Steps = 40
	}
	seed := rand.Uint64() % 1_000_000_000
	if v := os.Getenv("FENCELOCK_MODEL_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FENCELOCK_MODEL_SEED=%q: %v", v, err)
		}
		m.Histories, m.Regressions = 1, nil
	}
	t.Logf("seed %d (FENCELOCK_MODEL_SEED=%d replays the first history)", seed, seed)
	seeds := append([]uint64{}, m.Regressions...)
	for i := range m.Histories {
		seeds = append(seeds, seed+uint64(i))
	}
	var steps atomic.Int64
	runOne := func(i int, seed uint64) {
		h := history{t: t, m: m, seed: seed, r: rand.New(rand.NewPCG(seed, 7)), prefix: fmt.Sprintf("model-%d-%d-", seed, i), expiry: m.TTL > 0 && (i < len(m.Regressions) || seed%4 == 0)}
		real := h.side(func(t *testing.T) fencelock.Backend { return target.New(t) })
		store := memorybackend.New()
		model := h.side(func(t *testing.T) fencelock.Backend {
			b := store.Backend()
			t.Cleanup(func() { _ = b.Close() })
			return b
		})
		steps.Add(int64(h.run(real, model)))
	}
	// Histories share nothing but t (each its own names, Clients and model store), so AtOnce
	// of them run in goroutines of their own; none starts once one has failed. One at a time
	// runs in the test's goroutine, where a Target's t.Fatal belongs.
	var next atomic.Int64
	each := func() {
		for i := int(next.Add(1) - 1); i < len(seeds) && !t.Failed(); i = int(next.Add(1) - 1) {
			runOne(i, seeds[i])
		}
	}
	if m.AtOnce <= 1 {
		each()
	} else {
		var wg sync.WaitGroup
		for range min(m.AtOnce, len(seeds)) {
			wg.Go(each)
		}
		wg.Wait()
	}
	if t.Failed() {
		return
	}
	t.Logf("%d histories, %d operations compared with the model", len(seeds), steps.Load())
}

// Model says what the histories of RunModel draw, and what the backend lacks.
type Model struct {
	Histories int           // how many; 20 when zero
	Steps     int           // operations in each; 40 when zero
	TTL       time.Duration // the TTL of the locks that are left to expire: the backend's shortest
	// Semaphores and Elections say the backend keeps them (Redlock keeps no semaphores).
	Semaphores, Elections bool
	// Regressions are seeds of histories that found a difference once: each runs, with
	// expiries, before the fresh ones.
	Regressions []uint64
	// AtOnce is how many histories run at the same time; one when zero. More fit a backend
	// whose histories mostly wait on round trips and expiries; the Target's New is then called
	// from several goroutines at once.
	AtOnce int
}

// history is one seeded history; side is its Clients on one backend.
type history struct {
	t      *testing.T
	m      Model
	seed   uint64
	r      *rand.Rand
	prefix string
	expiry bool // some locks are left to expire, and the history waits for them: one in four
	// expiring: the operation drawn last takes a lock left to expire; the next waits for it
	expiring bool
}

type side struct {
	clients []*fencelock.Client
	handles []*fencelock.Lock  // by the step that got them; nil when released or refused
	by      []int              // the client that got each handle
	kinds   []string           // the kind of operation that got each handle
	tokens  map[string][]int64 // the distinct tokens granted per name, in order
}

func (h *history) side(newBackend func(t *testing.T) fencelock.Backend) *side {
	s := &side{tokens: map[string][]int64{}}
	for range 3 {
		c := fencelock.New(newBackend(h.t))
		h.t.Cleanup(func() { _ = c.Close() })
		s.clients = append(s.clients, c)
	}
	return s
}

// op is one drawn operation.
type op struct {
	kind     string // lock, reenter, release, permit, read, write, campaign, inspect, inspect-sem, leader, expire
	client   int
	name     string
	owner    string // WithOwner, or empty for a fresh one
	limit    int
	weight   int
	handle   int // for reenter and release: the step whose handle
	shortTTL bool
}

func (h *history) draw(step int, live, locks []int) op {
	r := h.r
	o := op{client: r.IntN(3), weight: 1}
	names := []string{h.prefix + "a", h.prefix + "b"}
	o.name = names[r.IntN(len(names))]
	if r.IntN(4) == 0 {
		// A named owner is one client's, as WithOwner across processes differs by backend
		// (ZooKeeper vouches only for its own session).
		o.owner, o.client = "owner-"+strconv.Itoa(r.IntN(2)), 0
	}
	kinds := []string{"lock", "lock", "lock", "reenter", "release", "release", "release", "inspect"}
	if h.m.Semaphores {
		kinds = append(kinds, "permit", "permit", "read", "write", "inspect-sem", "release")
	}
	if h.m.Elections {
		kinds = append(kinds, "campaign", "leader")
	}
	if h.expiring {
		// Right after a lock left to expire was taken: with other operations between, one of
		// them could land on one side before the expiry and on the other after it.
		h.expiring = false
		return op{kind: "expire"}
	}
	o.kind = kinds[r.IntN(len(kinds))]
	switch o.kind {
	case "reenter":
		if len(locks) == 0 {
			o.kind = "inspect"
			break
		}
		o.handle = locks[r.IntN(len(locks))]
	case "release":
		if len(live) == 0 {
			o.kind = "inspect"
			break
		}
		o.handle = live[r.IntN(len(live))]
	case "permit":
		o.name, o.limit, o.weight = h.prefix+"sem", 2+r.IntN(2), 1+r.IntN(2)
	case "read", "write", "inspect-sem":
		o.name = h.prefix + "rw"
		if o.kind == "inspect-sem" && r.IntN(2) == 0 {
			o.name = h.prefix + "sem"
		}
	case "campaign", "leader":
		o.name, o.owner, o.client = h.prefix+"election", "", r.IntN(3)
	}
	o.shortTTL = h.expiry && r.IntN(8) == 0
	h.expiring = o.shortTTL
	return o
}

// run draws the history's steps and applies each to both sides, comparing the results; it
// returns how many steps it ran.
func (h *history) run(real, model *side) int {
	var live, locks []int
	for step := range h.m.Steps {
		o := h.draw(step, live, locks)
		if o.kind == "expire" {
			// Both sides in real time: what was taken with the short TTL and no watchdog runs
			// out on the backend and in the model alike.
			time.Sleep(h.m.TTL + h.m.TTL/2 + 100*time.Millisecond)
			continue
		}
		got, want := real.apply(h, step, o), model.apply(h, step, o)
		if os.Getenv("FENCELOCK_MODEL_DEBUG") != "" {
			h.t.Logf("step %d %+v: %q / %q", step, o, got, want)
		}
		if got != want {
			h.t.Errorf("seed %d step %d %+v: the backend says %q, the model %q", h.seed, step, o, got, want)
			return step + 1
		}
		live, locks = live[:0], locks[:0]
		for i, l := range model.handles {
			if l != nil {
				live = append(live, i)
				if model.kinds[i] == "lock" {
					locks = append(locks, i)
				}
			}
		}
	}
	return h.m.Steps
}

// apply runs o on s, as step, and describes the outcome in terms the two sides share.
func (s *side) apply(h *history, step int, o op) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(s.handles) <= step {
		s.handles, s.by, s.kinds = append(s.handles, nil), append(s.by, 0), append(s.kinds, "")
	}
	c := s.clients[o.client]
	ttl := 30 * time.Second
	opts := []fencelock.Option{fencelock.WithTTL(ttl)}
	if o.shortTTL {
		opts = []fencelock.Option{fencelock.WithTTL(h.m.TTL), fencelock.WithWatchdog(false)}
	}
	if o.owner != "" {
		opts = append(opts, fencelock.WithOwner(o.owner))
	}
	var l *fencelock.Lock
	var err error
	switch o.kind {
	case "lock":
		l, err = c.TryObtain(ctx, o.name, opts...)
	case "reenter":
		held := s.handles[o.handle]
		if held.Valid() != nil {
			return "lost before re-entry" // it expired: both sides alike, or the result differs
		}
		l, err = s.clients[s.by[o.handle]].TryObtain(held.Context(), held.Name(), opts...)
	case "permit":
		l, err = c.Semaphore(o.name, o.limit).TryAcquire(ctx, append(opts, fencelock.WithWeight(o.weight))...)
	case "read":
		l, err = c.RWLock(o.name).TryRLock(ctx, opts...)
	case "write":
		l, err = c.RWLock(o.name).TryLock(ctx, opts...)
	case "campaign":
		// One attempt at the election's lock with the candidate's value, as a Campaign's
		// first attempt is: a Campaign that waits would make the comparison one of timing.
		l, err = c.TryObtain(ctx, o.name, append(opts, fencelock.WithMetadata("c"+strconv.Itoa(o.client)))...)
	case "release":
		held := s.handles[o.handle]
		s.handles[o.handle] = nil
		return "release: " + class(held.Release(ctx))
	case "inspect":
		info, err := c.Inspect(ctx, o.name)
		if err != nil {
			return "inspect: " + class(err)
		}
		return fmt.Sprintf("inspect: held %v count %d owner %s", info.Held, info.Count, s.ownerName(info.Owner, info.Held, -1))
	case "inspect-sem":
		info, err := c.Semaphore(o.name, 1).Inspect(ctx)
		if err != nil {
			return "inspect: " + class(err)
		}
		return fmt.Sprintf("inspect: limit %d in use %d permits %d waiting %d", info.Limit, info.InUse, len(info.Permits), info.Waiting)
	case "leader":
		ld, err := c.Election(o.name).Leader(ctx)
		if err != nil {
			return "leader: " + class(err)
		}
		return fmt.Sprintf("leader: elected %v owner %s value %q", ld.Elected, s.ownerName(ld.Owner, ld.Elected, -1), ld.Value)
	}
	if err != nil {
		return o.kind + ": " + class(err)
	}
	owner := s.ownerName(l.Owner(), true, step)
	s.handles[step], s.by[step], s.kinds[step] = l, o.client, o.kind
	if o.kind == "reenter" {
		s.by[step], s.kinds[step] = s.by[o.handle], s.kinds[o.handle]
	}
	return fmt.Sprintf("%s: granted count %d owner %s token %s", o.kind, l.HoldCount(), owner, s.token(l))
}

// token says where l's token stands among the name's: the n-th distinct one, new ones above
// every one before them.
func (s *side) token(l *fencelock.Lock) string {
	ts := s.tokens[l.Name()]
	for i, t := range ts {
		if t == l.Token() {
			return "#" + strconv.Itoa(i)
		}
	}
	if len(ts) > 0 && l.Token() <= ts[len(ts)-1] {
		return fmt.Sprintf("below #%d", len(ts)-1)
	}
	s.tokens[l.Name()] = append(ts, l.Token())
	return "#" + strconv.Itoa(len(ts))
}

// ownerName names an owner ID by the history's live handles: the first one under it, or
// "new" for one no live handle has (a backend may give a released lock's owner ID to its next
// acquisition, etcd does: only what is live tells owners apart). except is the handle being
// granted now, which does not name its own owner.
func (s *side) ownerName(id string, held bool, except int) string {
	switch {
	case !held:
		return "-"
	case strings.HasPrefix(id, "owner-"):
		return id
	}
	for i, l := range s.handles {
		if l != nil && i != except && l.Owner() == id {
			return "h" + strconv.Itoa(i)
		}
	}
	return "new"
}

// class names an error by what it means.
func class(err error) string {
	var held *fencelock.HeldError
	var limit *fencelock.LimitError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded):
		// Before held: a wait that ran out says so on every backend, and the last attempt's
		// refusal too on those that wait by attempts (Redlock).
		return "deadline"
	case errors.As(err, &limit):
		return fmt.Sprintf("limit (stored %d)", limit.Stored)
	case errors.As(err, &held):
		return "held"
	case errors.Is(err, fencelock.ErrUpgrade):
		return "upgrade"
	case errors.Is(err, fencelock.ErrNotHeld):
		return "not held"
	case errors.Is(err, fencelock.ErrLost):
		return "lost"
	case errors.Is(err, fencelock.ErrInvalid):
		return "invalid"
	}
	return "error: " + err.Error()
}
