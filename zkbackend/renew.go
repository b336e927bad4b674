package zkbackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// Renew implements driver.Backend. Nothing needs extending: a lock lives as long as the
// session that owns its node, which go-zookeeper keeps alive with its pings. Renew confirms
// instead, through that session's connection, that the session lives and the node is still
// there (witness), and vouches for the lock for one session timeout from the start of the
// call: the server cannot expire the session sooner after hearing from it. Each connection is
// synced with the leader once per call.
//
// The leases are checked at once, up to renewAtOnce of them, their requests pipelined on the
// connection: a Client's watchdog renews every lock it holds in one call under one deadline,
// and one round trip after another carried only as many locks as round trips fit in it.
func (b *Backend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	out := make([]driver.Renewal, len(leases))
	synced := new(syncs)
	if len(leases) == 1 {
		out[0].Validity, out[0].Err = b.renew(ctx, leases[0], synced)
		return out
	}
	slots := make(chan struct{}, renewAtOnce)
	var wg sync.WaitGroup
	for i, l := range leases {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			out[i].Validity, out[i].Err = b.renew(ctx, l, synced)
		})
	}
	wg.Wait()
	return out
}

// renewAtOnce bounds the leases one Renew checks at once: enough to fill a round trip of a
// LAN with requests, few enough that ten thousand locks do not make ten thousand goroutines.
const renewAtOnce = 256

// syncs is, per connection, the one sync of a Renew call: the first lease on a connection
// makes it, the others wait for it, and the send of that sync is their confirmation's.
type syncs struct {
	mu     sync.Mutex
	byConn map[*zk.Conn]*connSync
}

type connSync struct {
	done chan struct{} // closed once the sync has its answer, or its caller stopped waiting
	sent time.Time
	err  error
}

// of returns conn's sync, and whether the caller is the first to ask, who makes it.
func (s *syncs) of(conn *zk.Conn) (*connSync, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byConn[conn]; ok {
		return c, false
	}
	if s.byConn == nil {
		s.byConn = make(map[*zk.Conn]*connSync)
	}
	c := &connSync{done: make(chan struct{})}
	s.byConn[conn] = c
	return c, true
}

func (b *Backend) renew(ctx context.Context, l driver.Lease, synced *syncs) (time.Duration, error) {
	if err := b.usable(ctx, l.Name); err != nil {
		return 0, err
	}
	k := keyOf(l.Name, l.Owner, l.Limit)
	h, ok := b.holding(k)
	if ok && l.Token != 0 && h.token != l.Token {
		// Another node of the owner's (one an undo removes while a call of the owner's took
		// the next): it says nothing of the lease's. Look.
		ok = false
	}
	if ok && b.lost(h) {
		b.forget(k, h.path)
		return 0, fmt.Errorf("%w: the ZooKeeper session that owned the lock node of %q ended: it expired, or its connection was closed", driver.ErrNotHeld, l.Name)
	}
	if !ok {
		// Not known here (another Backend made the node for the same owner): look.
		var err error
		if k.permit {
			h, err = b.permitOf(ctx, k, "")
		} else {
			h, err = b.headOf(ctx, k)
		}
		if err != nil {
			return 0, err
		}
		if l.Token != 0 && h.token != l.Token {
			return 0, fmt.Errorf("%w: %q is held by this owner in ZooKeeper under another token than the lease's", driver.ErrNotHeld, l.Name)
		}
	}
	// The node's owner never changes and it was first in line, so existing is holding.
	_, keep, err := b.witness(ctx, h, synced)
	switch {
	case err == errVanished:
		b.forget(k, h.path)
		return 0, fmt.Errorf("%w: %q is no longer held by this owner in ZooKeeper", driver.ErrNotHeld, l.Name)
	case err != nil:
		return 0, err
	}
	if !ok {
		b.remember(k, h)
	}
	return keep, nil
}

// headOf returns the node first in line of k's lock, when it is k's owner's.
func (b *Backend) headOf(ctx context.Context, k holder) (holding, error) {
	dir := b.Path(k.name)
	q, err := b.queue(ctx, dir)
	if err != nil {
		return holding{}, err
	}
	if len(q) > 0 {
		path := dir + "/" + q[0].name
		sent := time.Now()
		data, stat, err := b.read(ctx, path)
		switch {
		case err == errVanished:
		case err != nil:
			return holding{}, err
		case data.owner == k.owner:
			return holdingOf(path, data, stat, sent), nil
		}
	}
	return holding{}, fmt.Errorf("%w: %q is no longer held by this owner in ZooKeeper", driver.ErrNotHeld, k.name)
}
