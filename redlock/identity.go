package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// identity checks, at first use, that no two nodes are the same server: two clients with
// different addresses (a proxy, a DNS alias, 127.0.0.1 and localhost) can reach one server,
// which would then count twice towards the majority. Each node's INFO server run_id (every
// master's, for a Cluster node) must differ from every other node's.
//
// The first acquisition waits for the answers, bounded by the node timeout, and so do the
// calls that come meanwhile, each as long as its context allows; a node that does not answer
// is asked again by a later call, at most once per identifyEvery and without making other
// calls wait, until every node has been seen. Until a node has been seen, its grants do not
// count towards an acquisition's majority: it might be another node's server.
type identity struct {
	known     []atomic.Bool // per node: its run IDs are known
	done      atomic.Bool   // every node's run IDs are known and distinct
	attempted atomic.Bool   // the first check has run
	dup       atomic.Value  // error: two nodes share a run ID; set once
	// turn is held during a check and guards ids and last: a channel of one, not a mutex, so
	// that a call waiting for another's check stops waiting when its context ends.
	turn chan struct{}
	ids  [][]string // per node, its run IDs; nil while unknown
	last time.Time  // when the last check ran
}

// identifyEvery spaces the checks of nodes not seen yet; identifyTimeout is the least a check
// waits for a node's answer, whatever the caller's node timeout: an INFO on a connection that
// is still being dialled can take longer than the 15 ms a 150 ms lock allows a node, and a node
// not seen does not count, so a check cut that short would keep every node out.
const (
	identifyEvery   = 100 * time.Millisecond
	identifyTimeout = 250 * time.Millisecond
)

func (id *identity) failed() error {
	if err, ok := id.dup.Load().(error); ok {
		return err
	}
	return nil
}

func (b *Backend) identify(ctx context.Context, timeout time.Duration) error {
	id := &b.ident
	if id.done.Load() {
		return nil
	}
	if id.attempted.Load() {
		select {
		case id.turn <- struct{}{}:
		default:
			return id.failed() // another call is checking; do not wait for it
		}
	} else {
		select { // the first check: every call waits for it, as long as its context allows
		case id.turn <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("redlock: waiting for the check that no two nodes are one server: %w", ctx.Err())
		}
	}
	defer func() { <-id.turn }()
	if id.done.Load() || id.failed() != nil || (id.attempted.Load() && time.Since(id.last) < identifyEvery) {
		return id.failed()
	}
	var missing []int
	for i, ids := range id.ids {
		if ids == nil {
			missing = append(missing, i)
		}
	}
	fanOut(ctx, b, missing, max(timeout, identifyTimeout), decide, func(ctx context.Context, nd *node) ([]string, error) {
		return runIDs(ctx, nd)
	}, func(r reply[[]string]) bool {
		if r.err == nil && len(r.v) > 0 {
			id.ids[r.node] = r.v
		}
		return false
	})
	if ctx.Err() != nil {
		return nil // the caller's context ended: not an attempt; the caller will say why
	}
	id.last = time.Now()
	id.attempted.Store(true)
	seen := make(map[string]int)
	known := 0
	for i, ids := range id.ids {
		if ids == nil {
			continue
		}
		known++
		for _, rid := range ids {
			if j, ok := seen[rid]; ok && j != i {
				dup := fmt.Errorf("%w: redlock nodes %d (%s) and %d (%s) are the same Redis server (run_id %s): it would count twice towards the majority", driver.ErrInvalid, j, b.nodes[j].addr, i, b.nodes[i].addr, rid)
				id.dup.Store(dup)
				return dup
			}
			seen[rid] = i
		}
	}
	for i, ids := range id.ids {
		if ids != nil {
			id.known[i].Store(true)
		}
	}
	if known == len(id.ids) {
		id.done.Store(true)
	}
	return nil
}

// seen reports whether node i's run IDs are known and distinct from the others'.
func (id *identity) seen(i int) bool { return id.done.Load() || id.known[i].Load() }

// runIDs returns the run_id of the server behind a node: of every master, for a Cluster.
func runIDs(ctx context.Context, nd *node) ([]string, error) {
	var mu sync.Mutex // ForEachMaster may call at once for several masters
	var ids []string
	err := nd.c.ForEachMaster(ctx, func(ctx context.Context, m redisconn.Node) error {
		v, err := m.Do(ctx, "INFO", "server")
		if err != nil {
			return err
		}
		info, _ := v.(string)
		rid := infoField(info, "run_id")
		if rid == "" {
			return fmt.Errorf("%w: INFO server has no run_id", driver.ErrUnavailable)
		}
		mu.Lock()
		ids = append(ids, rid)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
