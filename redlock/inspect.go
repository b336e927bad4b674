package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
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
		return nodeInfo{}, fmt.Errorf("%w: unexpected inspect reply %v", fencelock.ErrUnavailable, v)
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

// Inspect implements fencelock.Backend with the majority's view: the lock is held when a
// majority of nodes agree on its owner; Count and Remaining are what a majority of those nodes
// agree on (at least that count, at least that long), and Token is the greatest among them (a
// node that took the key back after a restart may know less). A free lock reports the greatest fence counter read as its
// last token. It needs answers from a majority of nodes.
func (b *Backend) Inspect(ctx context.Context, name string) (fencelock.Info, error) {
	if err := b.usable(name); err != nil {
		return fencelock.Info{}, err
	}
	if err := b.begin(); err != nil {
		return fencelock.Info{}, err
	}
	defer b.ops.Done()
	return b.inspect(ctx, name)
}

// inspect is Inspect within an operation already begun.
func (b *Backend) inspect(ctx context.Context, name string) (fencelock.Info, error) {
	if err := b.identify(ctx, forceTimeout); err != nil {
		return fencelock.Info{}, err
	}
	keys := b.keys(name)
	infos := make([]nodeInfo, 0, len(b.nodes))
	var failed []*NodeError
	votes := make(map[string]int)
	pending := fanOut(ctx, b, b.all, forceTimeout, read, func(ctx context.Context, nd *node) (nodeInfo, error) {
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
			if r.v.owner != "" {
				votes[r.v.owner]++
			}
		}
		// Decided when an owner has a majority, or none can get one any more.
		most := 0
		for _, v := range votes {
			most = max(most, v)
		}
		left := len(b.nodes) - len(infos) - len(failed)
		return len(infos) >= b.quorum && (most >= b.quorum || most+left < b.quorum)
	})
	if len(infos) < b.quorum {
		if ctx.Err() != nil {
			return fencelock.Info{}, ctxErr("inspect", name, ctx.Err())
		}
		return fencelock.Info{}, &QuorumError{Op: "inspect", Name: name, Granted: len(infos), Needed: b.quorum, Nodes: append(failed, b.timedOut(ctx, pending)...)}
	}
	return b.majority(name, infos), nil
}

// majority folds the nodes' views into one.
func (b *Backend) majority(name string, infos []nodeInfo) fencelock.Info {
	info := fencelock.Info{Name: name}
	votes := make(map[string]int)
	for _, ni := range infos {
		if ni.owner != "" {
			votes[ni.owner]++
		}
		info.Token = max(info.Token, ni.counter)
	}
	for owner, v := range votes {
		if v < b.quorum {
			continue
		}
		info = fencelock.Info{Name: name, Held: true, Owner: owner}
		var pttls []time.Duration
		var counts []int
		for _, ni := range infos {
			if ni.owner == owner {
				info.Token = max(info.Token, ni.token)
				if ni.meta != "" {
					info.Meta = ni.meta
				}
				counts = append(counts, ni.count)
				pttls = append(pttls, ni.pttl)
			}
		}
		// What a majority of the nodes agree on: at least quorum of them keep the lock that
		// long, with at least that count.
		slices.SortFunc(pttls, func(a, b time.Duration) int { return int(b - a) })
		info.Remaining, info.Count = pttls[b.quorum-1], quorumth(counts, b.quorum)
	}
	return info
}

// Names implements fencelock.Namer: it scans the nodes (every master of a Cluster node) for
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
