package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Contender is one lock library in one configuration, bound to its own connection(s). A
// benchmark that needs separate clients (one per contending worker, as separate processes
// would have) makes one Contender per worker. Methods are called from many goroutines at once.
//
// Adding a library is one file: a type with these three methods and an init function that
// calls register.
type Contender interface {
	// Obtain waits until it holds the lock name, the way the library waits in this setting,
	// or until ctx ends.
	Obtain(ctx context.Context, name string) (Held, error)
	// TryObtain makes one attempt. It fails with an error matching errHeld when someone else
	// holds the lock.
	TryObtain(ctx context.Context, name string) (Held, error)
	// Close releases the contender's connections.
	Close() error
}

// Held is a lock obtained from a Contender. Release returns once the library says the lock is
// released. The libraries' own lock types satisfy it where they can, so that the harness adds
// no allocation of its own to a cycle.
type Held interface {
	Release(ctx context.Context) error
}

// errHeld is what a contender's TryObtain returns when someone else holds the lock.
var errHeld = errors.New("lock held by someone else")

func isErrHeld(err error) bool { return errors.Is(err, errHeld) }

// errNoWait is what Obtain returns for a setting that cannot wait for a lock.
var errNoWait = errors.New("this setting does not wait for a lock")

// Entry describes one contender: a library in one setting.
type Entry struct {
	Library string // "fencelock", "bsm/redislock"
	Setting string // "defaults", "retry 1ms"
	// Floor marks the reference every ratio is taken against. Exactly one entry is the floor.
	Floor bool
	// Reference marks a recipe shown for scale beside the libraries, such as the fencing
	// floor: it is never counted as the best peer.
	Reference bool
	// Waits says whether Obtain waits for a held lock. Settings that make one attempt only
	// (a library's defaults, sometimes) are left out of the contention and handoff scenarios.
	Waits bool
	// Uncontended says whether the setting runs in the latency and throughput scenarios.
	// Settings that differ from another entry only in how they wait run the same code
	// uncontended, so only one of them is measured there.
	Uncontended bool
	// Nodes is how many independent redis-server processes New expects: 1, or 5 for Redlock.
	Nodes int
	// Note is a short remark printed below the tables.
	Note string
	// New connects a fresh contender to the servers at addrs (len(addrs) == Nodes).
	New func(addrs []string) (Contender, error)
}

// Label is the entry's name in tables.
func (e *Entry) Label() string {
	if e.Setting == "" {
		return e.Library
	}
	return e.Library + " (" + e.Setting + ")"
}

var registry []*Entry

// register adds an entry; called from the init function of each contender's file.
func register(e *Entry) {
	if e.Nodes == 0 {
		e.Nodes = 1
	}
	registry = append(registry, e)
}

// entries returns the registered entries in a stable order: the floor first, then by
// library and setting as registered.
func entries() []*Entry {
	out := slices.Clone(registry)
	slices.SortStableFunc(out, func(a, b *Entry) int {
		switch {
		case a.Floor && !b.Floor:
			return -1
		case b.Floor && !a.Floor:
			return 1
		}
		return rank(a.Library) - rank(b.Library)
	})
	return out
}

// rank orders libraries in tables: the floors first, then fencelock, then the peers.
func rank(lib string) int {
	order := []string{"floor", "fencing floor", "fencelock", "bsm/redislock", "redsync", "rueidislock", "go-zero"}
	if i := slices.Index(order, lib); i >= 0 {
		return i
	}
	return len(order)
}

// pollEvery is the interval of the "fastest sensible" polling settings. Go timers have about
// 1ms granularity on an idle machine, so a 1ms poll costs about 1.1ms.
const pollEvery = time.Millisecond

// pollObtain is the waiting loop a caller writes around a library that makes one attempt per
// call: try, sleep pollEvery, try again, until ctx ends.
func pollObtain(ctx context.Context, name string, try func(ctx context.Context, name string) (Held, error)) (Held, error) {
	var t *time.Timer
	for {
		h, err := try(ctx, name)
		if err == nil {
			return h, nil
		}
		if !isErrHeld(err) {
			return nil, err
		}
		if t == nil {
			t = time.NewTimer(pollEvery)
			defer t.Stop()
		} else {
			t.Reset(pollEvery)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-t.C:
		}
	}
}

// rounds hands out the order contenders run in, one round after another: a fresh random
// permutation each round (seeded, so that runs are alike), so that no contender always
// follows the same neighbour and inherits its garbage or its connections' state.
type rounds struct {
	order []int
	rnd   *rand.Rand
}

func newRounds(n int) *rounds {
	r := &rounds{order: make([]int, n), rnd: rand.New(rand.NewPCG(3, 4))}
	for i := range r.order {
		r.order[i] = i
	}
	return r
}

func (r *rounds) next() []int {
	r.rnd.Shuffle(len(r.order), func(a, b int) { r.order[a], r.order[b] = r.order[b], r.order[a] })
	return r.order
}
