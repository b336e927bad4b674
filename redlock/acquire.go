package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
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
			return acquireReply{}, fmt.Errorf("%w: unexpected acquire reply %v", fencelock.ErrUnavailable, v)
		}
	}
	switch {
	case len(n) == 5 && n[0] == 1:
		return acquireReply{granted: true, count: int(n[1]), token: n[2], counter: n[3], now: n[4]}, nil
	case len(n) == 4 && n[0] == 0:
		return acquireReply{pttl: time.Duration(n[1]) * time.Millisecond, counter: n[2], now: n[3]}, nil
	}
	return acquireReply{}, fmt.Errorf("%w: unexpected acquire reply %v", fencelock.ErrUnavailable, v)
}

// Acquire implements fencelock.Backend. It asks every node at once, each bounded by the node
// timeout, and holds the lock when a majority granted it in time: before the TTL less the
// drift allowance had passed since the requests were sent. Its Grant.Validity is the TTL,
// counted from that send, which Grant.Elapsed places after the call began (the first call
// also asks the nodes for their run_id first). A first acquisition then writes its fencing
// token back to a majority before returning it. When the lock is not obtained, the hold is
// released again on every node that may have granted it, including those that did not
// answer, on a fresh context bounded by the node timeout.
//
// The error is a *fencelock.HeldError when other owners hold enough nodes to deny a majority,
// a *QuorumError when too many nodes failed, an error matching ErrValidityExpired when the
// time ran out, and one matching ctx.Err() when ctx ended.
func (b *Backend) Acquire(ctx context.Context, req fencelock.Request) (fencelock.Grant, error) {
	called := time.Now()
	if err := b.usable(req.Name); err != nil {
		return fencelock.Grant{}, err
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return fencelock.Grant{}, err
	}
	if err := b.begin(); err != nil {
		return fencelock.Grant{}, err
	}
	defer b.ops.Done()
	timeout := b.timeout(req.TTL)
	if err := b.identify(ctx, timeout); err != nil {
		return fencelock.Grant{}, err
	}
	keys := b.keys(req.Name)
	ttl := req.TTL.Milliseconds()
	n, q := len(b.nodes), b.quorum
	proposal := b.propose()
	retention := max(b.retention, req.TTL).Milliseconds()

	start := time.Now()
	replies := make([]acquireReply, n)
	answered := make([]bool, n)
	var granted, held int
	var failed []*NodeError
	fl, prev := b.flights.start(req.Name, req.Owner, n)
	pending := fanOut(ctx, b, b.all, timeout, decide, func(ctx context.Context, nd *node) (acquireReply, error) {
		defer b.flights.land(req.Name, req.Owner, fl, nd.i)
		if err := prev.wait(ctx, nd.i); err != nil {
			return acquireReply{}, err
		}
		v, err := acquireScript.Run(ctx, nd.c, keys, req.Owner, req.Hold, ttl, req.Meta, proposal, retention).Slice()
		if err != nil {
			return acquireReply{}, err
		}
		return parseAcquire(v)
	}, func(r reply[acquireReply]) bool {
		if r.err != nil {
			failed = append(failed, b.nodeErr(r.node, r.err))
			return len(failed) > n-q
		}
		replies[r.node], answered[r.node] = r.v, true
		if r.v.granted && !b.ident.seen(r.node) {
			failed = append(failed, b.nodeErr(r.node, errUnidentified))
			return len(failed) > n-q
		}
		if r.v.granted {
			granted++
			return granted >= q
		}
		held++
		return held > n-q
	})
	failed = append(failed, b.timedOut(ctx, pending)...)

	// The nodes that may hold this hold now: all but those that said another owner holds it.
	mayHold := func() []int {
		var idx []int
		for i := range n {
			if !answered[i] || replies[i].granted {
				idx = append(idx, i)
			}
		}
		return idx
	}
	if ctx.Err() != nil {
		b.undo(ctx, req, fl, mayHold(), timeout)
		return fencelock.Grant{}, ctxErr("acquire", req.Name, ctx.Err())
	}
	if granted < q {
		b.undo(ctx, req, fl, mayHold(), timeout)
		if len(failed) > n-q {
			return fencelock.Grant{}, &QuorumError{Op: "acquire", Name: req.Name, Granted: granted, Needed: q, Nodes: failed}
		}
		return fencelock.Grant{}, &fencelock.HeldError{Name: req.Name, Remaining: b.heldRemaining(replies, answered, granted)}
	}
	if elapsed := time.Since(start); late(elapsed, req.TTL) {
		b.undo(ctx, req, fl, mayHold(), timeout)
		return fencelock.Grant{}, fmt.Errorf("%w: %q: a majority granted it after %v, TTL %v", ErrValidityExpired, req.Name, elapsed.Round(time.Microsecond), req.TTL)
	}

	// A reentrant acquisition keeps the holder's token. A first one has its token when every
	// node that granted it stored the proposal; else it makes one in a token round.
	count, token := 0, int64(0)
	proposed := proposal > 0
	for i, r := range replies {
		if answered[i] && r.granted {
			count = max(count, r.count)
			if r.count > 1 {
				token = max(token, r.token)
			} else if r.token != proposal {
				proposed = false
			}
		}
	}
	if token == 0 && proposed {
		token = proposal
	}
	if token == 0 {
		var err error
		token, err = b.fence(ctx, req, keys, replies, answered, timeout)
		if err != nil {
			b.undo(ctx, req, fl, b.all, timeout)
			return fencelock.Grant{}, err
		}
	}

	if elapsed := time.Since(start); late(elapsed, req.TTL) {
		b.undo(ctx, req, fl, b.all, timeout)
		return fencelock.Grant{}, fmt.Errorf("%w: %q: the token was written after %v, TTL %v", ErrValidityExpired, req.Name, elapsed.Round(time.Microsecond), req.TTL)
	}
	return fencelock.Grant{Token: token, Count: count, Validity: req.TTL, Elapsed: start.Sub(called)}, nil
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
func (b *Backend) heldRemaining(replies []acquireReply, answered []bool, granted int) time.Duration {
	var pttls []time.Duration
	for i, r := range replies {
		if answered[i] && !r.granted {
			pttls = append(pttls, r.pttl)
		}
	}
	if len(pttls) == 0 {
		return 0
	}
	slices.Sort(pttls)
	k := min(max(b.quorum-granted, 1), len(pttls))
	return pttls[k-1]
}

// fence makes the fencing token of a first acquisition and writes it back to a majority. The
// candidate is the greatest counter read in the acquire round plus one, or the greatest
// server clock read then, whichever is greater; a round that meets a counter at or beyond it
// takes that counter plus one and writes again.
func (b *Backend) fence(ctx context.Context, req fencelock.Request, keys []string, replies []acquireReply, answered []bool, timeout time.Duration) (int64, error) {
	var token int64
	for i, r := range replies {
		if answered[i] {
			token = max(token, r.counter+1)
			if b.timeTokens {
				token = max(token, r.now)
			}
		}
	}
	n, q := len(b.nodes), b.quorum
	retention := max(b.retention, req.TTL).Milliseconds()
	var last *QuorumError
	for range fenceRounds {
		arg := strconv.FormatInt(token, 10)
		var written, conflicts int
		var beyond int64
		var failed []*NodeError
		pending := fanOut(ctx, b, b.all, timeout, decide, func(ctx context.Context, nd *node) (int64, error) {
			v, err := fenceScript.Run(ctx, nd.c, keys, req.Owner, arg, retention).Int64Slice()
			if err != nil {
				return 0, err
			}
			if len(v) != 2 {
				return 0, fmt.Errorf("%w: unexpected token reply %v", fencelock.ErrUnavailable, v)
			}
			if v[0] == 1 {
				return -1, nil
			}
			return v[1], nil // the counter that was at or beyond the candidate
		}, func(r reply[int64]) bool {
			switch {
			case r.err != nil:
				failed = append(failed, b.nodeErr(r.node, r.err))
				return len(failed) > n-q
			case r.v >= 0:
				conflicts++
				beyond = max(beyond, r.v)
				return true
			}
			written++
			return written >= q
		})
		if ctx.Err() != nil {
			return 0, ctxErr("acquire", req.Name, ctx.Err())
		}
		if conflicts > 0 {
			token = max(token, beyond) + 1
			continue
		}
		if written >= q {
			return token, nil
		}
		last = &QuorumError{Op: "token", Name: req.Name, Granted: written, Needed: q, Nodes: append(failed, b.timedOut(ctx, pending)...)}
		break
	}
	if last == nil {
		return 0, fmt.Errorf("%w: redlock: token %q: fence counters kept moving ahead of the candidate for %d rounds", fencelock.ErrUnavailable, req.Name, fenceRounds)
	}
	return 0, last
}

// undo releases the hold of a failed acquisition on the nodes idx, on a fresh context bounded
// by the node timeout, and waits until they answered or the timeout passed. On each node it
// waits first for the acquire call of fl there.
func (b *Backend) undo(ctx context.Context, req fencelock.Request, fl *flight, idx []int, timeout time.Duration) {
	if len(idx) == 0 {
		return
	}
	ctx, cancel := cleanupContext(ctx, timeout)
	defer cancel()
	keys := []string{b.Key(req.Name)}
	fanOut(ctx, b, idx, 0, decide, func(ctx context.Context, nd *node) (struct{}, error) {
		if err := fl.wait(ctx, nd.i); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, releaseScript.Run(ctx, nd.c, keys, req.Owner, req.Hold, nd.publish).Err()
	}, func(reply[struct{}]) bool { return false })
}
