package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// fenceRounds bounds the token write-back: a round that finds a counter at or beyond the
// candidate takes the greatest such counter plus one and tries again.
const fenceRounds = 4

// acquireReply is one node's answer to acquire.lua.
type acquireReply struct {
	granted bool
	count   int           // granted: the owner's hold count on the node
	token   int64         // granted: the token recorded on the node, 0 before the token round
	pttl    time.Duration // refused: the holder's remaining TTL on the node
	counter int64         // the node's fence counter
	now     int64         // the node's clock, µs
}

func parseAcquire(v []any) (acquireReply, error) {
	n := make([]int64, len(v))
	for i, x := range v {
		var ok bool
		if n[i], ok = x.(int64); !ok {
			return acquireReply{}, fmt.Errorf("%w: unexpected acquire reply %v", driver.ErrUnavailable, v)
		}
	}
	switch {
	case len(n) == 5 && n[0] == 1:
		return acquireReply{granted: true, count: int(n[1]), token: n[2], counter: n[3], now: n[4]}, nil
	case len(n) == 4 && n[0] == 0:
		return acquireReply{pttl: time.Duration(n[1]) * time.Millisecond, counter: n[2], now: n[3]}, nil
	}
	return acquireReply{}, fmt.Errorf("%w: unexpected acquire reply %v", driver.ErrUnavailable, v)
}

// Acquire implements driver.Backend. It asks every node at once, each bounded by the node
// timeout, and holds the lock when a majority granted it in time: before the TTL less the
// drift allowance had passed since the requests were sent. Its Grant.Validity is the TTL,
// counted from that send, which Grant.Elapsed places after the call began (the first call
// also asks the nodes for their run_id first). A first acquisition then writes its fencing
// token back to a majority before returning it, and so does a reentrant one whose nodes do not
// agree on the lock's token (see agree). When the lock is not obtained, the hold is released
// again on every node that may have granted it, including those that did not answer, on a
// fresh context bounded by the node timeout.
//
// The error is a *driver.HeldError when other owners hold enough nodes to deny a majority,
// a *QuorumError when too many nodes failed, an error matching ErrValidityExpired when the
// time ran out, and one matching ctx.Err() when ctx ended.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	called := time.Now()
	if err := b.usable(req.Name); err != nil {
		return driver.Grant{}, err
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return driver.Grant{}, err
	}
	if err := b.begin(); err != nil {
		return driver.Grant{}, err
	}
	defer b.ops.Done()
	done, err := b.turns.take(ctx, req.Name, req.Owner)
	if err != nil {
		return driver.Grant{}, ctxErr("acquire", req.Name, err)
	}
	defer done()
	timeout := b.timeout(req.TTL)
	if err := b.identify(ctx, timeout); err != nil {
		return driver.Grant{}, err
	}
	proposal := b.propose()
	start := time.Now()
	fl, prev := b.flights.start(req.Name, req.Owner, len(b.nodes))
	r, pending := b.acquireRound(ctx, req, proposal, fl, prev, b.flights.undoing(req.Name), timeout)
	r.failed = append(r.failed, b.timedOut(ctx, pending)...)

	n, q := len(b.nodes), b.quorum
	switch {
	case ctx.Err() != nil:
		b.undo(ctx, req, r.mayHold(), timeout)
		return driver.Grant{}, ctxErr("acquire", req.Name, ctx.Err())
	case r.granted < q && len(r.failed) > n-q:
		b.undo(ctx, req, r.mayHold(), timeout)
		return driver.Grant{}, &QuorumError{Op: "acquire", Name: req.Name, Granted: r.granted, Needed: q, Nodes: r.failed}
	case r.granted < q:
		b.undo(ctx, req, r.mayHold(), timeout)
		return driver.Grant{}, &driver.HeldError{Name: req.Name, Remaining: b.heldRemaining(r)}
	}
	if elapsed := time.Since(start); late(elapsed, req.TTL) {
		b.undo(ctx, req, r.mayHold(), timeout)
		return driver.Grant{}, fmt.Errorf("%w: %q: a majority granted it after %v, TTL %v", ErrValidityExpired, req.Name, elapsed.Round(time.Microsecond), req.TTL)
	}

	a := r.agree(q, proposal, req.Token)
	token, count := a.token, a.count
	switch {
	case token == 0:
		var err error
		if token, count, err = b.fence(ctx, req, r, timeout); err != nil {
			b.undo(ctx, req, b.all, timeout)
			return driver.Grant{}, err
		}
	case len(a.others) > 0:
		b.writeBack(ctx, req, a, timeout)
	}
	if elapsed := time.Since(start); late(elapsed, req.TTL) {
		b.undo(ctx, req, b.all, timeout)
		return driver.Grant{}, fmt.Errorf("%w: %q: the token was written after %v, TTL %v", ErrValidityExpired, req.Name, elapsed.Round(time.Microsecond), req.TTL)
	}
	return driver.Grant{Token: token, Count: count, Validity: req.TTL, Elapsed: start.Sub(called)}, nil
}

// acquireRound is what the nodes answered to one acquisition's requests.
type acquireRound struct {
	replies  []acquireReply
	answered []bool // by node: it granted or refused
	counts   []bool // by node: it granted, and its grant counts towards the majority
	granted  int    // nodes whose grant counts
	held     int    // nodes held by another owner
	failed   []*NodeError
}

// acquireRound sends the acquisition to every node. Each call waits first for the owner's
// acquire call before it on its node (prev) and for the lock's undo in the air there (undo,
// see flights), and lands in fl when it returns. It returns as soon as the outcome is decided
// (see settled), with the nodes that had not answered then.
func (b *Backend) acquireRound(ctx context.Context, req driver.Request, proposal int64, fl, prev, undo *flight, timeout time.Duration) (*acquireRound, []int) {
	n, q := len(b.nodes), b.quorum
	r := &acquireRound{replies: make([]acquireReply, n), answered: make([]bool, n), counts: make([]bool, n)}
	keys := b.keys(req.Name)
	ttl := req.TTL.Milliseconds()
	retention := max(b.retention, req.TTL).Milliseconds()
	pending := fanOut(ctx, b, b.all, timeout, decide, func(ctx context.Context, nd *node) (acquireReply, error) {
		defer b.flights.land(req.Name, req.Owner, fl, nd.i)
		if err := prev.wait(ctx, nd.i); err != nil {
			return acquireReply{}, err
		}
		if err := undo.wait(ctx, nd.i); err != nil {
			return acquireReply{}, err
		}
		ctx, cancel := sendContext(ctx, timeout)
		defer cancel()
		v, err := redisconn.Slice(nd.c.Eval(ctx, acquireScript, keys, req.Owner, req.Hold, ttl, req.Meta, proposal, retention))
		if err != nil {
			return acquireReply{}, err
		}
		return parseAcquire(v)
	}, func(rep reply[acquireReply]) bool {
		switch {
		case rep.err != nil:
			r.failed = append(r.failed, b.nodeErr(rep.node, rep.err))
		case !rep.v.granted:
			r.replies[rep.node], r.answered[rep.node] = rep.v, true
			r.held++
		case !b.ident.seen(rep.node):
			r.replies[rep.node], r.answered[rep.node] = rep.v, true
			r.failed = append(r.failed, b.nodeErr(rep.node, errUnidentified))
		default:
			r.replies[rep.node], r.answered[rep.node], r.counts[rep.node] = rep.v, true, true
			r.granted++
		}
		unknown := n - r.granted - r.held - len(r.failed)
		return len(r.failed) > n-q || r.held > n-q || r.settled(q, unknown, proposal)
	})
	return r, pending
}

// quorumth returns the q-th greatest of counts: what a majority of q nodes keep at least.
func quorumth(counts []int, q int) int {
	sorted := slices.Clone(counts)
	slices.SortFunc(sorted, func(a, b int) int { return b - a })
	return sorted[q-1]
}

// mayHold returns the nodes that may hold the acquisition's hold now: all but those that said
// another owner holds it.
func (r *acquireRound) mayHold() []int {
	var idx []int
	for i := range r.replies {
		if !r.answered[i] || r.replies[i].granted {
			idx = append(idx, i)
		}
	}
	return idx
}

// An agreement is what the nodes that granted an acquisition say its token is.
type agreement struct {
	token  int64 // 0: none; a token round makes one
	count  int   // the hold count a majority keeps
	others []int // the granting nodes whose lock does not carry the token
}

// agree returns the token a majority of the granting nodes agree on. A grant may carry the
// token of the owner's lock from before (a reentrant grant) only when a majority keep that
// lock, with that token and no greater fence counter: a node that alone kept an old lock of
// the owner (a release did not reach it) must not bring its token back, since other owners may
// have taken the lock on the other nodes since, with greater tokens. A first acquisition has
// its token when a majority stored the proposal. A re-entry whose caller holds the lock with
// a token (known, see driver.Request.Token) keeps it when no granting node has a fence
// counter or a token above it: the granting nodes are a majority, and every token handed out
// is on a majority, so none above it was. Anything else takes a token round.
func (r *acquireRound) agree(q int, proposal, known int64) agreement {
	token, voters, fresh := r.tally(proposal)
	var a agreement
	switch {
	case len(voters) >= q:
		a = agreement{token: token, count: r.keptCount(voters, q)}
	case len(fresh) >= q:
		a = agreement{token: proposal, count: 1}
	case known > 0 && r.noneAbove(known, proposal):
		var granting []int
		for i := range r.replies {
			if r.counts[i] {
				granting = append(granting, i)
			}
		}
		a = agreement{token: known, count: r.keptCount(granting, q)}
	default:
		return agreement{}
	}
	for i, rep := range r.replies {
		if r.counts[i] && rep.token != a.token {
			a.others = append(a.others, i)
		}
	}
	return a
}

// keptCount is the hold count a majority of the nodes idx keep.
func (r *acquireRound) keptCount(idx []int, q int) int {
	counts := make([]int, len(idx))
	for k, i := range idx {
		counts[k] = r.replies[i].count
	}
	return quorumth(counts, q)
}

// noneAbove reports whether no granting node had a fence counter or a token above token
// before this acquisition (a first hold's token that is the proposal is this acquisition's).
func (r *acquireRound) noneAbove(token, proposal int64) bool {
	for i, rep := range r.replies {
		ours := rep.count == 1 && rep.token == proposal
		if r.counts[i] && (rep.counter > token || rep.token > token && !ours) {
			return false
		}
	}
	return true
}

// tally returns the token that most granting nodes keep the owner's lock from before with, and
// those nodes, and the granting nodes that stored the proposal in a first hold.
func (r *acquireRound) tally(proposal int64) (token int64, voters, fresh []int) {
	votes := make(map[int64][]int)
	for i, rep := range r.replies {
		switch {
		case !r.counts[i]:
		case rep.count >= 2 && rep.token > 0 && rep.counter <= rep.token:
			votes[rep.token] = append(votes[rep.token], i)
		case rep.count == 1 && proposal > 0 && rep.token == proposal:
			fresh = append(fresh, i)
		}
	}
	for t, v := range votes {
		if len(v) > len(voters) || (len(v) == len(voters) && t > token) {
			token, voters = t, v
		}
	}
	return token, voters, fresh
}

// settled reports whether an acquisition that has a majority of grants knows its token, or
// knows that it needs a token round, with unknown nodes still to answer: while the granting
// nodes disagree and the others could still make a majority for one token, it waits for them.
func (r *acquireRound) settled(q, unknown int, proposal int64) bool {
	if r.granted < q {
		return false
	}
	_, voters, fresh := r.tally(proposal)
	return len(voters) >= q || len(fresh) >= q || (len(voters)+unknown < q && len(fresh)+unknown < q)
}

// propose returns the token this Backend proposes for its next first acquisition: the clock
// in µs, or one more than the last proposal when the clock has not moved past it. Zero (no
// proposal) when the clock is not a term of the token.
func (b *Backend) propose() int64 {
	if !b.timeTokens {
		return 0
	}
	for {
		last := b.lastProposal.Load()
		next := max(time.Now().UnixMicro(), last+1)
		if b.lastProposal.CompareAndSwap(last, next) {
			return next
		}
	}
}

// heldRemaining is how long until the holders' keys have expired on enough nodes for a
// majority to be free: with g nodes granted, the (quorum-g)-th shortest remaining TTL among
// the nodes held by others.
func (b *Backend) heldRemaining(r *acquireRound) time.Duration {
	var pttls []time.Duration
	for i, rep := range r.replies {
		if r.answered[i] && !rep.granted {
			pttls = append(pttls, rep.pttl)
		}
	}
	if len(pttls) == 0 {
		return 0
	}
	slices.Sort(pttls)
	k := min(max(b.quorum-r.granted, 1), len(pttls))
	return pttls[k-1]
}

// fence makes a new fencing token and writes it back to a majority, and returns it with the
// hold count a majority keeps. The candidate is above every counter and token the acquire
// round read, and at least the greatest server clock read then; a round that meets a counter
// at or beyond it takes that counter plus one and writes again. Each write waits, on its node,
// for the acquisition's acquire call there (the owner's flight before it), so that the lock
// exists there when the write records the token in it. The owner's other holds there stay
// (see fence.lua).
func (b *Backend) fence(ctx context.Context, req driver.Request, r *acquireRound, timeout time.Duration) (int64, int, error) {
	var token int64
	for i, rep := range r.replies {
		if r.answered[i] {
			token = max(token, rep.counter+1, rep.token+1)
			if b.timeTokens {
				token = max(token, rep.now)
			}
		}
	}
	n, q := len(b.nodes), b.quorum
	keys := b.keys(req.Name)
	retention := max(b.retention, req.TTL).Milliseconds()
	var last *QuorumError
	for range fenceRounds {
		arg := strconv.FormatInt(token, 10)
		var counts []int
		var conflicts int
		var beyond int64
		var failed []*NodeError
		// The writes are a flight of their own, which the owner's later calls on the lock wait
		// for node by node: a write that lands after them would take a hold they made.
		wf, prev := b.flights.start(req.Name, req.Owner, n)
		pending := fanOut(ctx, b, b.all, timeout, decide, func(ctx context.Context, nd *node) (tokenWrite, error) {
			defer b.flights.land(req.Name, req.Owner, wf, nd.i)
			if err := prev.wait(ctx, nd.i); err != nil {
				return tokenWrite{}, err
			}
			ctx, cancel := sendContext(ctx, timeout)
			defer cancel()
			return writeToken(ctx, nd, keys, req, arg, retention)
		}, func(rep reply[tokenWrite]) bool {
			switch {
			case rep.err != nil:
				failed = append(failed, b.nodeErr(rep.node, rep.err))
				return len(failed) > n-q
			case !rep.v.written:
				conflicts++
				beyond = max(beyond, rep.v.beyond)
				return true
			}
			counts = append(counts, rep.v.count)
			return len(counts) >= q
		})
		if ctx.Err() != nil {
			return 0, 0, ctxErr("acquire", req.Name, ctx.Err())
		}
		if conflicts > 0 {
			token = max(token, beyond) + 1
			continue
		}
		if len(counts) >= q {
			return token, max(quorumth(counts, q), 1), nil
		}
		last = &QuorumError{Op: "token", Name: req.Name, Granted: len(counts), Needed: q, Nodes: append(failed, b.timedOut(ctx, pending)...)}
		break
	}
	if last == nil {
		return 0, 0, fmt.Errorf("%w: redlock: token %q: fence counters kept moving ahead of the candidate for %d rounds", driver.ErrUnavailable, req.Name, fenceRounds)
	}
	return 0, 0, last
}

// tokenWrite is one node's answer to fence.lua.
type tokenWrite struct {
	written bool
	count   int   // written: the owner's hold count on the node, 0 when it does not hold it there
	beyond  int64 // not written: the counter that was at or beyond the token
}

// writeToken runs fence.lua on one node.
func writeToken(ctx context.Context, nd *node, keys []string, req driver.Request, token string, retention int64) (tokenWrite, error) {
	v, err := redisconn.Int64s(nd.c.Eval(ctx, fenceScript, keys, req.Owner, token, retention, req.Hold))
	if err != nil {
		return tokenWrite{}, err
	}
	if len(v) != 2 {
		return tokenWrite{}, fmt.Errorf("%w: unexpected token reply %v", driver.ErrUnavailable, v)
	}
	if v[0] == 1 {
		return tokenWrite{written: true, count: int(v[1])}, nil
	}
	return tokenWrite{beyond: v[1]}, nil
}

// writeBack makes the granting nodes that disagree with the majority's token carry it, so that
// every node names the lock alike (Inspect, a renewal's take-back and a later reentrant grant
// read it); their holds stay as they are (see fence.lua). It is best effort: the token stands
// on the majority.
func (b *Backend) writeBack(ctx context.Context, req driver.Request, a agreement, timeout time.Duration) {
	ctx, cancel := cleanupContext(ctx, timeout)
	defer cancel()
	keys := b.keys(req.Name)
	arg := strconv.FormatInt(a.token, 10)
	retention := max(b.retention, req.TTL).Milliseconds()
	fanOut(ctx, b, a.others, 0, decide, func(ctx context.Context, nd *node) (struct{}, error) {
		_, err := nd.c.Eval(ctx, recordScript, keys, req.Owner, arg, retention)
		return struct{}{}, err
	}, func(reply[struct{}]) bool { return false })
}

// undo releases the hold of a failed acquisition on the nodes idx, in the background, so that
// Acquire returns by its deadline. The undo is a flight of the owner's own, recorded before
// Acquire returns: on each node it waits for the owner's flight before it (the acquire call,
// or a token write after it), and the lock's next acquisition through this Backend, of any
// owner, waits for it there (see flights), so the undo can never take a hold that acquisition
// made, nor leave that acquisition to meet this one's hold. Each call is bounded by the node
// timeout and nodeLinger; Close waits for them.
func (b *Backend) undo(ctx context.Context, req driver.Request, idx []int, timeout time.Duration) {
	if len(idx) == 0 {
		return
	}
	uf, prev, before := b.flights.startUndo(req.Name, req.Owner, len(b.nodes))
	mine := make([]bool, len(b.nodes))
	for _, i := range idx {
		mine[i] = true
	}
	ctx, cancel := cleanupContext(ctx, max(timeout, nodeLinger))
	b.calls.Add(1) // within Acquire's operation, so before Close waits for calls
	go func() {
		defer b.calls.Done()
		defer cancel()
		keys := []string{b.Key(req.Name)}
		var wg sync.WaitGroup
		for _, nd := range b.nodes {
			wg.Go(func() {
				defer b.flights.land(req.Name, req.Owner, uf, nd.i)
				if prev.wait(ctx, nd.i) != nil || before.wait(ctx, nd.i) != nil || !mine[nd.i] {
					return
				}
				ctx, cancel := sendContext(ctx, timeout)
				defer cancel()
				_, _ = nd.c.Eval(ctx, releaseScript, keys, req.Owner, req.Hold, nd.announce, 0)
			})
		}
		wg.Wait()
	}()
}
