package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// renewReply is one node's answer for one lease.
type renewReply struct {
	state int   // 1 extended, 0 another owner holds it, -1 the key is gone
	token int64 // extended: the token recorded on the node
	count int   // extended: the hold count on the node
	meta  string
	err   error
}

// renewTally is what the nodes said of one lease.
type renewTally struct {
	ok, notHeld int
	token       int64
	count       int
	meta        string
	gone        []int // nodes where the key was gone: taken back once a majority confirmed
	failed      []*NodeError
	decided     bool
}

// Renew implements driver.Backend. The leases go to every node at once, as one pipeline per
// node, and the batch waits for the nodes as long as the greatest node timeout of its leases:
// a lease with a short TTL must not cut short the wait for the others. A lease is renewed
// when a majority extended it, each node for the lease's TTL after it received the renewal:
// its Renewal.Validity is the TTL, counted from the call (see driver.Renewal). It is not
// held (ErrNotHeld) when a majority says so; otherwise the outcome is unknown (a *QuorumError,
// or ErrValidityExpired when the majority confirmed it only once no validity was left after
// the drift allowance) and the Client tries again while its validity deadline allows.
//
// A node that lost the key (a restart without persistence, or a partition long enough for it
// to expire there) gets it back, for the same owner, token and count, but only after a
// majority confirmed the lease and only if the key is still free on that node.
func (b *Backend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	out := make([]driver.Renewal, len(leases))
	live, timeout := b.renewable(leases, out)
	if len(live) == 0 {
		return out
	}
	if err := b.begin(); err != nil {
		for _, j := range live {
			out[j].Err = err
		}
		return out
	}
	defer b.ops.Done()
	// A node not identified yet is asked again (at most once a second, without waiting for
	// another call's check), so that its confirmations count once it has answered.
	if err := b.identify(ctx, timeout); err != nil {
		for _, j := range live {
			out[j].Err = err
		}
		return out
	}
	n, q := len(b.nodes), b.quorum
	keys := make([][]string, len(live))
	args := make([][]any, len(live))
	for k, j := range live {
		keys[k] = []string{b.Key(leases[j].Name)}
		set := 0 // extend only
		if leases[j].Refresh {
			set = max(leases[j].Holds, 1)
		}
		args[k] = []any{leases[j].Owner, leases[j].TTL.Milliseconds(), set}
	}

	start := time.Now()
	tallies := make([]renewTally, len(live))
	undecided := len(live)
	pending := fanOut(ctx, b, b.all, timeout, decide, func(ctx context.Context, nd *node) ([]renewReply, error) {
		out := renewOn(ctx, nd.c, keys, args)
		if err := ctx.Err(); err != nil {
			return nil, err // the node timeout or ctx: fanOut tells which
		}
		return out, nil
	}, func(r reply[[]renewReply]) bool {
		if r.err == nil && !b.ident.seen(r.node) {
			r.err = errUnidentified // it might be another node's server: it must not count twice
		}
		for k := range tallies {
			t := &tallies[k]
			rr := renewReply{err: r.err}
			if r.err == nil {
				rr = r.v[k]
			}
			t.add(b, r.node, rr)
			if !t.decided && (t.ok >= q || t.notHeld > n-q || len(t.failed) > n-q) {
				t.decided = true
				undecided--
			}
		}
		return undecided == 0
	})
	elapsed := time.Since(start)
	timedOut := b.timedOut(ctx, pending)

	if retake := b.renewed(ctx, live, leases, tallies, elapsed, timedOut, out); len(retake) > 0 {
		b.retake(ctx, retake, live, leases, tallies, timeout)
	}
	return out
}

// renewed sets each lease's outcome in out from its tally, and returns the leases to take
// back on the nodes that lost them: node → indexes into live.
func (b *Backend) renewed(ctx context.Context, live []int, leases []driver.Lease, tallies []renewTally, elapsed time.Duration, timedOut []*NodeError, out []driver.Renewal) map[int][]int {
	n, q := len(b.nodes), b.quorum
	retake := make(map[int][]int)
	for k, j := range live {
		t, l := &tallies[k], leases[j]
		switch {
		case t.ok >= q:
			if late(elapsed, l.TTL) {
				out[j].Err = fmt.Errorf("%w: %q: a majority confirmed the renewal after %v, TTL %v", ErrValidityExpired, l.Name, elapsed.Round(time.Microsecond), l.TTL)
				continue
			}
			out[j].Validity = l.TTL
			for _, i := range t.gone {
				retake[i] = append(retake[i], k)
			}
		case t.notHeld > n-q:
			out[j].Err = fmt.Errorf("%w: %q: %d of %d nodes no longer hold it for this owner", driver.ErrNotHeld, l.Name, t.notHeld, n)
		case ctx.Err() != nil:
			out[j].Err = ctxErr("renew", l.Name, ctx.Err())
		default:
			out[j].Err = &QuorumError{Op: "renew", Name: l.Name, Granted: t.ok, Needed: q, Nodes: append(t.failed, timedOut...)}
		}
	}
	return retake
}

// renewable returns the leases of a batch that can be sent, setting the error of the others
// in out, and the batch's node timeout: the greatest of its leases'.
func (b *Backend) renewable(leases []driver.Lease, out []driver.Renewal) (live []int, timeout time.Duration) {
	for j, l := range leases {
		if err := b.usable(l.Name); err != nil {
			out[j].Err = err
			continue
		}
		if err := b.checkTTL(l.TTL); err != nil {
			out[j].Err = err
			continue
		}
		timeout = max(timeout, b.timeout(l.TTL))
		live = append(live, j)
	}
	return live, timeout
}

// add counts node i's answer for the lease.
func (t *renewTally) add(b *Backend, i int, rr renewReply) {
	switch {
	case rr.err != nil:
		t.failed = append(t.failed, b.nodeErr(i, classifyOnce(rr.err)))
	case rr.state == 1:
		t.ok++
		t.token, t.count = max(t.token, rr.token), max(t.count, rr.count)
		if rr.meta != "" {
			t.meta = rr.meta
		}
	case rr.state == -1:
		t.notHeld++
		t.gone = append(t.gone, i)
	default:
		t.notHeld++
	}
}

// renewOn sends the renewals to one node: one script call, or one pipeline for a batch.
func renewOn(ctx context.Context, c redisconn.Conn, keys [][]string, args [][]any) []renewReply {
	out := make([]renewReply, len(keys))
	for k, call := range evalBatch(ctx, c, renewScript, keys, args) {
		v, err := redisconn.Slice(call.Reply, call.Err)
		if err != nil {
			out[k].err = err
			continue
		}
		var state int64 = 2 // none of the known replies
		if len(v) > 0 {
			state, _ = v[0].(int64)
		}
		switch {
		case len(v) == 4 && state == 1:
			token, _ := v[1].(int64)
			count, _ := v[2].(int64)
			meta, _ := v[3].(string)
			out[k] = renewReply{state: 1, token: token, count: int(count), meta: meta}
		case len(v) == 1 && (state == 0 || state == -1):
			out[k].state = int(state)
		default:
			out[k].err = fmt.Errorf("%w: unexpected renew reply %v", driver.ErrUnavailable, v)
		}
	}
	return out
}

// retake takes the leases back on the nodes that had lost them, where still free. It is best
// effort: the renewal stands on the majority that confirmed it. It waits for the nodes no
// longer than ctx allows, so that a renewal returns by its deadline; a call still running then
// goes on, bounded by the node timeout. Each call is a flight of its lease's owner on the lock
// (see flights), so that a release that follows waits for it on that node: a retake that
// landed after the release would leave the key there for no one until its TTL ended.
func (b *Backend) retake(ctx context.Context, retake map[int][]int, live []int, leases []driver.Lease, tallies []renewTally, timeout time.Duration) {
	type owned struct{ f, prev *flight }
	fls := make(map[flightKey]owned)
	on := make(map[flightKey][]bool) // by node: the flight has a call there
	for i, ks := range retake {
		for _, k := range ks {
			l := leases[live[k]]
			fk := flightKey{l.Name, l.Owner}
			if _, ok := fls[fk]; !ok {
				f, prev := b.flights.start(l.Name, l.Owner, len(b.nodes))
				fls[fk], on[fk] = owned{f, prev}, make([]bool, len(b.nodes))
			}
			on[fk][i] = true
		}
	}
	for fk, o := range fls {
		for i, has := range on[fk] {
			if !has {
				b.flights.land(fk.name, fk.owner, o.f, i)
			}
		}
	}
	idx := make([]int, 0, len(retake))
	for i := range retake {
		idx = append(idx, i)
	}
	retention := b.retention
	fanOut(ctx, b, idx, timeout, decide, func(ctx context.Context, nd *node) (struct{}, error) {
		ks := retake[nd.i]
		mine := make(map[flightKey]owned, len(ks))
		for _, k := range ks {
			l := leases[live[k]]
			mine[flightKey{l.Name, l.Owner}] = fls[flightKey{l.Name, l.Owner}]
		}
		defer func() {
			for fk, o := range mine {
				b.flights.land(fk.name, fk.owner, o.f, nd.i)
			}
		}()
		for _, o := range mine {
			if err := o.prev.wait(ctx, nd.i); err != nil {
				return struct{}{}, err
			}
		}
		keys := make([][]string, len(ks))
		args := make([][]any, len(ks))
		for m, k := range ks {
			l, t := leases[live[k]], tallies[k]
			keys[m] = b.keys(l.Name)
			args[m] = []any{l.Owner, l.TTL.Milliseconds(), t.token, max(t.count, 1), max(retention, l.TTL).Milliseconds(), t.meta}
		}
		evalBatch(ctx, nd.c, retakeScript, keys, args)
		return struct{}{}, nil
	}, func(reply[struct{}]) bool { return false })
}

// evalBatch runs script once per keys/args pair on one node, in one round trip (see
// redisconn.Conn.EvalBatch).
func evalBatch(ctx context.Context, c redisconn.Conn, script *redisconn.Script, keys [][]string, args [][]any) []redisconn.Call {
	calls := make([]redisconn.Call, len(keys))
	for k := range keys {
		calls[k] = redisconn.Call{Script: script, Keys: keys[k], Args: args[k]}
	}
	c.EvalBatch(ctx, calls)
	return calls
}
