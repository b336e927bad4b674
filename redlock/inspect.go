package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
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
		v, err := inspectScript.Run(ctx, nd.c, keys).Slice()
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

// List implements fencelock.Lister: it scans the nodes (every master of a Cluster node) for
// lock keys and reports those a majority holds. A majority of nodes scanned is enough, since a
// lock held by a majority is on at least one of them. It sees each lock as it was when
// inspected, not one instant.
func (b *Backend) List(ctx context.Context, prefix string) ([]fencelock.Info, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := b.begin(); err != nil {
		return nil, err
	}
	defer b.ops.Done()
	match := globEscape(b.prefix+"{"+prefix) + "*}"
	names := make(map[string]struct{})
	var failed []*NodeError
	scanned := 0
	fanOut(ctx, b, b.all, 0, read, func(ctx context.Context, nd *node) ([]string, error) {
		return b.scan(ctx, nd, match)
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
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	var out []fencelock.Info
	for _, n := range sorted {
		info, err := b.inspect(ctx, n)
		if err != nil {
			return out, err
		}
		if info.Held {
			out = append(out, info)
		}
	}
	return out, nil
}

// scan returns the names of the lock keys on one node.
func (b *Backend) scan(ctx context.Context, nd *node, match string) ([]string, error) {
	var mu sync.Mutex // ForEachMaster runs its callbacks concurrently
	var names []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 512).Iterator()
		for iter.Next(ctx) {
			k := iter.Val() // <prefix>{name}; fence counters and channels end after the brace
			mu.Lock()
			names = append(names, k[len(b.prefix)+1:len(k)-1])
			mu.Unlock()
		}
		return iter.Err()
	}
	switch c := nd.c.(type) {
	case *redis.ClusterClient:
		return names, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	case redis.Cmdable:
		return names, scan(ctx, c)
	}
	return nil, fmt.Errorf("%w: listing needs go-redis clients that can SCAN, node %d is a %T", fencelock.ErrInvalid, nd.i, nd.c)
}

// globEscape escapes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
