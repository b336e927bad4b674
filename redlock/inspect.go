package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// nodeInfo is one node's view of a lock, from inspect.lua.
type nodeInfo struct {
	owner   string
	count   int
	token   int64
	pttl    time.Duration
	counter int64
	meta    string
}

func parseInspect(v []any) (nodeInfo, error) {
	if len(v) < 6 {
		return nodeInfo{}, fmt.Errorf("%w: unexpected inspect reply %v", driver.ErrUnavailable, v)
	}
	var ni nodeInfo
	ni.owner, _ = v[0].(string)
	count, _ := v[1].(int64)
	ni.count = int(count)
	ni.token, _ = v[2].(int64)
	pttl, _ := v[3].(int64)
	if pttl > 0 {
		ni.pttl = time.Duration(pttl) * time.Millisecond
	}
	if s, ok := v[4].(string); ok {
		ni.counter, _ = strconv.ParseInt(s, 10, 64)
	}
	ni.meta, _ = v[5].(string)
	return ni, nil
}

// Inspect implements driver.Backend with the majority's view: the lock is held when a
// majority of nodes keep it for one owner under one token, the token its grant stored; Count
// and Remaining are what those nodes agree on (at least that count, at least that long). On
// each node it reads after the Backend's own acquire calls still on their way there. A
// free lock reports the greatest fence counter read as its last token. It needs answers from
// a majority of nodes.
//
// While an acquisition settles its token, a majority can keep the lock for its owner under
// tokens that differ: 0 on the nodes that wait for the token round, a proposal that a minority
// stored. Neither is a token anyone was handed, and a token read there can be below one
// returned before: Inspect reads again, with a growing pause, until a majority agrees or
// settleWait has passed, and then fails with an error matching driver.ErrUnavailable.
func (b *Backend) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := b.usable(name); err != nil {
		return driver.Info{}, err
	}
	if err := b.begin(); err != nil {
		return driver.Info{}, err
	}
	defer b.ops.Done()
	give := time.Now().Add(settleWait)
	for pause := graceMin; ; pause = min(2*pause, settlePauseMax) {
		v, err := b.inspect(ctx, name)
		switch {
		case err != nil:
			return driver.Info{}, err
		case v.settled:
			return v.Info, nil
		case time.Now().Add(pause).After(give):
			return driver.Info{}, fmt.Errorf("%w: inspect %q: a majority keep it for owner %s, under tokens that still differ after %v", errUnsettled, name, v.Owner, settleWait)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return driver.Info{}, ctxErr("inspect", name, ctx.Err())
		}
	}
}

// settleWait bounds how long Inspect reads again a lock whose token is still being settled;
// settlePauseMax is the longest pause between two reads. A token round takes a round trip or
// two; a majority that disagrees for longer lost a token write to a fault.
const (
	settleWait     = time.Second
	settlePauseMax = 50 * time.Millisecond
)

// A view is the nodes' answers folded into one lock.
type view struct {
	driver.Info
	// settled says Info is a lock a majority agrees on, or a free one. Otherwise a majority
	// keeps the lock for Info.Owner under tokens that differ, and Info.Token is the greatest
	// of them: the lock is being settled, or a fault left it so.
	settled bool
}

// inspect reads the lock once, within an operation already begun.
func (b *Backend) inspect(ctx context.Context, name string) (view, error) {
	if err := b.identify(ctx, b.forceTimeout()); err != nil {
		return view{}, err
	}
	keys := b.keys(name)
	infos := make([]nodeInfo, 0, len(b.nodes))
	var failed []*NodeError
	votes := make(map[holding]int)
	// Its own acquisitions first: one returns once a majority granted it, and a node that has
	// yet to count it would make the lock look as it was before (a re-entry's count).
	flying := b.flights.onLock(name)
	pending := fanOut(ctx, b, b.all, b.forceTimeout(), read, func(ctx context.Context, nd *node) (nodeInfo, error) {
		for _, f := range flying {
			if err := f.wait(ctx, nd.i); err != nil {
				return nodeInfo{}, err
			}
		}
		v, err := redisconn.Slice(nd.c.Eval(ctx, inspectScript, keys))
		if err != nil {
			return nodeInfo{}, err
		}
		return parseInspect(v)
	}, func(r reply[nodeInfo]) bool {
		if r.err != nil {
			failed = append(failed, b.nodeErr(r.node, r.err))
		} else {
			infos = append(infos, r.v)
			if r.v.owner != "" && r.v.token > 0 {
				votes[holding{r.v.owner, r.v.token}]++
			}
		}
		// Decided when one owner and token have a majority, or none can get one any more.
		most := 0
		for _, v := range votes {
			most = max(most, v)
		}
		left := len(b.nodes) - len(infos) - len(failed)
		return len(infos) >= b.quorum && (most >= b.quorum || most+left < b.quorum)
	})
	if len(infos) < b.quorum {
		if ctx.Err() != nil {
			return view{}, ctxErr("inspect", name, ctx.Err())
		}
		return view{}, &QuorumError{Op: "inspect", Name: name, Granted: len(infos), Needed: b.quorum, Nodes: append(failed, b.timedOut(ctx, pending)...)}
	}
	return b.majority(name, infos), nil
}

// holding is a lock as one node keeps it: its owner and its token.
type holding struct {
	owner string
	token int64
}

// majority folds the nodes' views into one: the lock of the owner a majority keeps it for,
// under the token a majority of nodes agree on (see view).
func (b *Backend) majority(name string, infos []nodeInfo) view {
	owners := make(map[string]int)
	votes := make(map[holding]int)
	var counter int64
	for _, ni := range infos {
		if ni.owner != "" {
			owners[ni.owner]++
			if ni.token > 0 {
				votes[holding{ni.owner, ni.token}]++
			}
		}
		counter = max(counter, ni.counter)
	}
	for h, v := range votes {
		if v >= b.quorum {
			return view{Info: b.fold(name, infos, func(ni nodeInfo) bool { return ni.owner == h.owner && ni.token == h.token }), settled: true}
		}
	}
	for owner, v := range owners {
		if v >= b.quorum {
			return view{Info: b.fold(name, infos, func(ni nodeInfo) bool { return ni.owner == owner })}
		}
	}
	return view{Info: driver.Info{Name: name, Token: counter}, settled: true}
}

// fold returns the lock that the nodes of infos that keep it agree on, at least quorum of
// them: the greatest token among them, what a majority keeps at least (count, remaining
// time), and the holder's metadata.
func (b *Backend) fold(name string, infos []nodeInfo, keeps func(nodeInfo) bool) driver.Info {
	info := driver.Info{Name: name, Held: true}
	var pttls []time.Duration
	var counts []int
	for _, ni := range infos {
		if !keeps(ni) {
			continue
		}
		info.Owner = ni.owner
		info.Token = max(info.Token, ni.token)
		if ni.meta != "" {
			info.Meta = ni.meta
		}
		counts = append(counts, ni.count)
		pttls = append(pttls, ni.pttl)
	}
	slices.SortFunc(pttls, func(a, b time.Duration) int { return int(b - a) })
	info.Remaining, info.Count = pttls[b.quorum-1], quorumth(counts, b.quorum)
	return info
}

// Names implements driver.Namer: it scans the nodes (every master of a Cluster node) for
// lock keys. A majority of nodes scanned is enough, since a lock held by a majority is on at
// least one of them; fencelock.List then keeps those a majority holds.
func (b *Backend) Names(ctx context.Context, prefix string) ([]string, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := b.begin(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	names := make(map[string]struct{})
	var failed []*NodeError
	scanned := 0
	fanOut(ctx, b, b.all, 0, read, func(ctx context.Context, nd *node) ([]string, error) {
		return redislayer.Names(ctx, nd.c, b.prefix, prefix)
	}, func(r reply[[]string]) bool {
		if r.err != nil {
			failed = append(failed, b.nodeErr(r.node, r.err))
			return false
		}
		scanned++
		for _, n := range r.v {
			names[n] = struct{}{}
		}
		return scanned >= b.quorum // a node that is down or slow does not hold the listing up
	})
	if scanned < b.quorum {
		if ctx.Err() != nil {
			return nil, ctxErr("list", prefix, ctx.Err())
		}
		return nil, &QuorumError{Op: "list", Name: prefix, Granted: scanned, Needed: b.quorum, Nodes: failed}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	return out, nil
}
