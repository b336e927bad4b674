package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// Release implements driver.Backend. It ends the hold on every node at once, each bounded by
// the node timeout, and returns once a majority answered; the calls to the other nodes go on
// after it returns. On a node where an acquire call of the owner is still running, the release
// waits for it first. The count left is what a majority still
// holds: the quorum-th greatest count among the nodes. It is ErrNotHeld when a majority says
// the owner does not hold the lock, and a *QuorumError when fewer than a majority answered.
//
// When a majority answered that the lock is free but a node still keeps it for the owner with
// a count that no hold ID stands for (a node that took the key back after a restart keeps no
// hold IDs), that node's key is deleted too. A lock with a hold ID left is not: the hold may
// be another process's of the same owner, whose acquisition landed there after the other nodes
// answered (TestReleaseKeepsAnAcquisitionInFlightOfTheSameOwner); it expires with its TTL.
func (b *Backend) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	if err := b.begin(); err != nil {
		return 0, err
	}
	defer b.ops.Done()
	timeout := b.timeout(lease.TTL)
	n, q := len(b.nodes), b.quorum
	keys := []string{b.Key(lease.Name)}
	counts := make([]int, n)
	var answered, notHeld, freed int // freed: nodes that answered the owner holds no lock there
	var failed []*NodeError
	fl := b.flights.get(lease.Name, lease.Owner)
	tail := &releaseTail{kept: make([]bool, n)}
	pending := fanOut(ctx, b, b.all, timeout, decide, func(ctx context.Context, nd *node) (int64, error) {
		if err := fl.wait(ctx, nd.i); err != nil {
			return 0, err
		}
		ctx, cancel := sendContext(ctx, timeout)
		defer cancel()
		v, err := redisconn.Int64(nd.c.Eval(ctx, releaseScript, keys, lease.Owner, hold, nd.announce, lease.Token))
		if err == nil && v > 0 && tail.keeps(nd.i) {
			// The majority decided the lock is free before this node answered.
			_, _ = nd.c.Eval(ctx, dropScript, keys, lease.Owner, nd.announce, "1")
		}
		return v, err
	}, func(r reply[int64]) bool {
		if r.err != nil {
			failed = append(failed, b.nodeErr(r.node, r.err))
			return false
		}
		answered++
		counts[r.node] = int(r.v)
		if r.v < 0 {
			notHeld++
		}
		if r.v == 0 || r.v == -1 {
			freed++ // not -2: the owner holds a later lock there
		}
		// Decided once the nodes still to answer cannot change the outcome: usually at the
		// majority, since the nodes agree. They disagree while another client of the same
		// owner re-enters the lock, and then Release waits for more of them. The rest go on
		// after Release returns: a dead node does not delay it.
		return decidedRelease(counts, n-answered-len(failed), notHeld, q)
	})
	switch {
	case answered < q && ctx.Err() != nil:
		return 0, ctxErr("release", lease.Name, ctx.Err())
	case answered < q:
		return 0, &QuorumError{Op: "release", Name: lease.Name, Granted: answered, Needed: q, Nodes: append(failed, b.timedOut(ctx, pending)...)}
	case notHeld >= q:
		return 0, fmt.Errorf("%w: %q: %d of %d nodes say this owner does not hold it", driver.ErrNotHeld, lease.Name, notHeld, n)
	}
	left := max(quorumth(counts, q), 0)
	// Free only when a majority said so: a node that failed may keep holds of the same owner's
	// other processes, which must not be dropped from the node that has them.
	if stale := tail.decide(freed >= q); len(stale) > 0 {
		b.drop(ctx, lease.Name, lease.Owner, stale, true, timeout)
	}
	return left, nil
}

// decidedRelease says whether a release's outcome is known while unknown nodes have yet to
// answer: whether a majority says the owner does not hold the lock, and the count left, the
// quorum-th greatest count, are the same whatever they answer. counts holds 0 for the nodes
// that have not answered.
func decidedRelease(counts []int, unknown, notHeld, q int) bool {
	if notHeld >= q {
		return true
	}
	if notHeld+unknown >= q {
		return false
	}
	sorted := slices.Clone(counts)
	for i, c := range sorted {
		sorted[i] = max(c, 0)
	}
	slices.SortFunc(sorted, func(a, b int) int { return b - a })
	// The unknown nodes answering high would push the quorum-th greatest count up to the
	// (quorum-unknown)-th greatest known one.
	hi := q - 1 - unknown
	return hi >= 0 && sorted[hi] == sorted[q-1]
}

// A releaseTail clears the nodes that still keep a lock for its owner, with no hold ID left
// (see drop.lua), once the majority has freed it: a node that took the key back after a
// restart knows no hold IDs, so releasing a hold there leaves its count. Release returns once a majority answered; a node that answers
// later clears itself, in its own call, when the decision is known by then.
type releaseTail struct {
	mu      sync.Mutex
	decided bool
	free    bool   // decided: the lock is free by the majority
	kept    []bool // by node: answered before the decision, still keeping the lock
}

// keeps is a node's answer that it still keeps the lock: true when the majority decided
// already that the lock is free, so that the node should clear it; otherwise the node is
// recorded for decide.
func (t *releaseTail) keeps(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decided {
		return t.free
	}
	t.kept[i] = true
	return false
}

// decide records the majority's decision and returns the nodes that answered before it and
// still keep the lock, when it is free.
func (t *releaseTail) decide(free bool) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decided, t.free = true, free
	if !free {
		return nil
	}
	var stale []int
	for i, k := range t.kept {
		if k {
			stale = append(stale, i)
		}
	}
	return stale
}

// drop deletes the lock on the nodes idx where owner holds it — with phantom, only where no
// hold ID is left in it (see drop.lua) — on a fresh context bounded by the node timeout, and
// reports on how many it did.
func (b *Backend) drop(ctx context.Context, name, owner string, idx []int, phantom bool, timeout time.Duration) int {
	if len(idx) == 0 {
		return 0
	}
	keep := "0"
	if phantom {
		keep = "1"
	}
	ctx, cancel := cleanupContext(ctx, timeout)
	defer cancel()
	keys := []string{b.Key(name)}
	dropped := 0
	fanOut(ctx, b, idx, 0, decide, func(ctx context.Context, nd *node) (int64, error) {
		return redisconn.Int64(nd.c.Eval(ctx, dropScript, keys, owner, nd.announce, keep))
	}, func(r reply[int64]) bool {
		if r.err == nil && r.v == 1 {
			dropped++
		}
		return false
	})
	return dropped
}

// ForceRelease implements driver.ForceReleaser: it deletes the lock on every node where
// the owner that a majority agrees on holds it, and wakes its waiters. The fence counters
// stay, so the next token is still greater. Info.Held is false when no owner held a majority.
func (b *Backend) ForceRelease(ctx context.Context, name string) (driver.Info, error) {
	if err := b.usable(name); err != nil {
		return driver.Info{}, err
	}
	if err := b.begin(); err != nil {
		return driver.Info{}, err
	}
	defer b.ops.Done()
	// The owner a majority keeps the lock for, whether or not its token is settled yet: an
	// operator removes the lock either way.
	v, err := b.inspect(ctx, name)
	if err != nil || !v.Held {
		return v.Info, err
	}
	b.drop(ctx, name, v.Owner, b.all, false, b.forceTimeout())
	return v.Info, nil
}

// forceTimeout bounds each node call of the calls that have no TTL to size it by (Inspect,
// ForceRelease): a second, or the node timeout when WithNodeTimeout sets a longer one, since a
// node that answers within the node timeout is up.
func (b *Backend) forceTimeout() time.Duration { return max(time.Second, b.nodeTimeout) }
