package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
)

var _ fencelock.Semaphores = (*Backend)(nil)

// A semaphore of limit L is a queue as a lock's is, under a prefix of its own: each holder and
// waiter has a key on its session's lease, and the L keys created first hold the permits. A
// key's create revision is its permit's fencing token. A key's value is its limit and its
// holds ("L<limit>\n" and the holds as a lock's key has them); every key in the queue agrees on
// the limit with the oldest, since each one that joined compared its limit with the oldest
// key's in the transaction that made it, and left at once when they differed.

// place is where an owner's hold of a lock, or of a permit, is kept.
type place struct {
	key, meta string
	limit     int // the semaphore's; 0 for a lock
}

func (b *Backend) place(name, owner string, limit int) place {
	if limit > 0 {
		return place{key: b.PermitKey(name, owner), meta: b.prefix + "!semmeta/" + url.PathEscape(name) + "/" + owner, limit: limit}
	}
	return place{key: b.Key(name, owner), meta: b.metaKey(name, owner)}
}

// PermitKey returns the key that owner's permit of the semaphore name, or its place in the
// semaphore's line, is kept under. Its create revision is the permit's fencing token.
func (b *Backend) PermitKey(name, owner string) string { return b.semPrefix(name) + owner }

// semPrefix is the prefix of the keys of the semaphore name. It starts with "!", as the
// metadata keys do, so that no lock's queue prefix is a prefix of it.
func (b *Backend) semPrefix(name string) string {
	return b.prefix + "!sem/" + url.PathEscape(name) + "/"
}

// value is the value of p's key with holds h.
func (p place) value(h holds) string {
	if p.limit > 0 {
		return "L" + strconv.Itoa(p.limit) + "\n" + h.encode()
	}
	return h.encode()
}

// holds reads the holds from the value v of p's key.
func (p place) holds(v []byte) (holds, error) {
	if p.limit > 0 {
		_, h, err := decodePermit(v)
		return h, err
	}
	return decodeHolds(v)
}

// decodePermit reads a permit key's value: its limit and its holds.
func decodePermit(v []byte) (int, holds, error) {
	head, rest, ok := strings.Cut(string(v), "\n")
	limit, err := strconv.Atoi(strings.TrimPrefix(head, "L"))
	if !ok || !strings.HasPrefix(head, "L") || err != nil || limit < 1 {
		return 0, nil, fmt.Errorf("%w: a semaphore key holds %q, which fencelock did not write", fencelock.ErrInvalid, v)
	}
	h, err := decodeHolds([]byte(rest))
	return limit, h, err
}

// enqueuePermit is enqueue for a permit of the semaphore req.Name: it makes the owner's key,
// and reads in the same transaction the first req.Limit keys, oldest first, which hold the
// permits.
func (b *Backend) enqueuePermit(ctx context.Context, s *session, req fencelock.Request, queue bool, start time.Time) (fencelock.Grant, error) {
	if req.Weight > 1 {
		return fencelock.Grant{}, fmt.Errorf("%w: %q: the etcd backend takes one permit at a time; WithWeight and an RWLock's write lock need the Redis backend", fencelock.ErrInvalid, req.Name)
	}
	p := b.place(req.Name, req.Owner, req.Limit)
	pfx := b.semPrefix(req.Name)
	first := clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(req.Limit)))
	then := []clientv3.Op{clientv3.OpPut(p.key, p.value(holds{req.Hold}), clientv3.WithLease(s.id)), first}
	if req.Meta != "" {
		then = append(then, clientv3.OpPut(p.meta, req.Meta, clientv3.WithLease(s.id)))
	}
	sent := time.Now()
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)).
		Then(then...).
		Else(clientv3.OpGet(p.key), first).
		Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fencelock.Grant{}, err
		}
		return fencelock.Grant{}, classify(err)
	}
	holders := resp.Responses[1].GetResponseRange().Kvs
	if resp.Succeeded {
		rev := resp.Header.Revision
		if err := agreed(req, holders); err != nil {
			b.leave(ctx, req, rev)
			return fencelock.Grant{}, err
		}
		if madeHolder(holders, rev) {
			return b.granted(ctx, req.Name, s.id, rev, 1, start, sent)
		}
		if !queue {
			b.leave(ctx, req, rev)
			return fencelock.Grant{}, &fencelock.HeldError{Name: req.Name, Limit: req.Limit}
		}
		sent, err := b.waitPermit(ctx, s.done, req, pfx, p.key, rev)
		if err != nil {
			b.leave(ctx, req, rev)
			return fencelock.Grant{}, err
		}
		return b.granted(ctx, req.Name, s.id, rev, 1, start, sent)
	}

	// The owner has a key already: a reentrant acquisition, or the retry of one whose outcome
	// was lost.
	mine := resp.Responses[0].GetResponseRange().Kvs
	if len(mine) == 0 {
		return fencelock.Grant{}, fmt.Errorf("%w: the owner's key vanished during the acquisition", fencelock.ErrUnavailable)
	}
	if limit, _, err := decodePermit(mine[0].Value); err != nil {
		return fencelock.Grant{}, err
	} else if limit != req.Limit {
		return fencelock.Grant{}, &fencelock.LimitError{Name: req.Name, Limit: req.Limit, Stored: limit}
	}
	if !madeHolder(holders, mine[0].CreateRevision) {
		if !queue {
			return fencelock.Grant{}, &fencelock.HeldError{Name: req.Name, Limit: req.Limit}
		}
		ended := b.leaseEnded(clientv3.LeaseID(mine[0].Lease))
		if sent, err = b.waitPermit(ctx, ended, req, pfx, p.key, mine[0].CreateRevision); err != nil {
			return fencelock.Grant{}, err
		}
	}
	return b.reenter(ctx, req, p, mine[0], start, sent)
}

// agreed says whether req's limit is the oldest key's, which every key in the queue agrees
// with.
func agreed(req fencelock.Request, oldest []*mvccpb.KeyValue) error {
	if len(oldest) == 0 {
		return nil
	}
	limit, _, err := decodePermit(oldest[0].Value)
	if err != nil {
		return err
	}
	if limit != req.Limit {
		return &fencelock.LimitError{Name: req.Name, Limit: req.Limit, Stored: limit}
	}
	return nil
}

// madeHolder says whether the key made at rev is among the holders, the first keys of the
// queue.
func madeHolder(holders []*mvccpb.KeyValue, rev int64) bool {
	for _, kv := range holders {
		if kv.CreateRevision == rev {
			return true
		}
	}
	return false
}

// waitPermit waits until fewer than req.Limit keys of the queue were created before the
// waiter's, made at rev. It watches the queue for deletions from before each read, so that no
// deletion passes unseen, and returns when the read that found so was sent. ended closes when
// the lease of the waiter's key is known to be gone.
func (b *Backend) waitPermit(ctx context.Context, ended <-chan struct{}, req fencelock.Request, pfx, key string, rev int64) (time.Time, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var wch clientv3.WatchChan
	for {
		if wch == nil {
			// The watch starts at the current revision (see waitDelete); the read below comes
			// after it exists.
			wch = b.c.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
			if err := waitCreated(ctx, ended, wch); err != nil {
				return time.Now(), err
			}
		}
		sent := time.Now()
		resp, err := b.c.Txn(ctx).Then(
			// Keys, not a count: etcd counts a range before its revision filter.
			clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev-1), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(req.Limit))),
			clientv3.OpGet(key, clientv3.WithKeysOnly()),
		).Commit()
		if err != nil {
			return sent, classify(err)
		}
		if mine := resp.Responses[1].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != rev {
			return sent, fmt.Errorf("%w: %w", fencelock.ErrUnavailable, errSessionExpired)
		}
		if len(resp.Responses[0].GetResponseRange().Kvs) < req.Limit {
			return sent, nil
		}
		// Until a deletion: any one of a key ahead may give the waiter its permit.
	events:
		for {
			select {
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					// Broken (no leader, a compaction): watch again, then read again, a
					// moment later so that a cluster without a leader is not flooded.
					wch = nil
					if !pause(ctx, 100*time.Millisecond) {
						return sent, ctx.Err()
					}
					break events
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						break events
					}
				}
			case <-ended:
				return sent, fmt.Errorf("%w: %w", fencelock.ErrUnavailable, errSessionExpired)
			case <-ctx.Done():
				return sent, ctx.Err()
			}
		}
	}
}

// pause sleeps d, or until ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitCreated waits for the watch wch to be in place. A watch that cannot be made is no
// error: the caller then reads without one, as after a broken watch.
func waitCreated(ctx context.Context, ended <-chan struct{}, wch clientv3.WatchChan) error {
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Created {
				return nil
			}
		case <-ended:
			return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, errSessionExpired)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// InspectSemaphore implements fencelock.Semaphores. The token it reports is the newest key's
// create revision: etcd keeps no counter of its own.
func (b *Backend) InspectSemaphore(ctx context.Context, name string) (fencelock.SemaphoreInfo, error) {
	info := fencelock.SemaphoreInfo{Name: name}
	if err := b.usable(name); err != nil {
		return info, err
	}
	pfx := b.semPrefix(name)
	metaPfx := b.prefix + "!semmeta/" + url.PathEscape(name) + "/"
	resp, err := b.c.Txn(ctx).Then(
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(metaPfx, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return info, classify(err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return info, nil
	}
	meta := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		meta[strings.TrimPrefix(string(kv.Key), metaPfx)] = string(kv.Value)
	}
	limit, _, err := decodePermit(kvs[0].Value)
	if err != nil {
		return info, err
	}
	info.Limit = limit
	info.Token = kvs[len(kvs)-1].CreateRevision
	info.Waiting = max(len(kvs)-limit, 0)
	left := map[int64]time.Duration{}
	for _, kv := range kvs[:min(limit, len(kvs))] {
		_, h, err := decodePermit(kv.Value)
		if err != nil {
			return info, err
		}
		owner := strings.TrimPrefix(string(kv.Key), pfx)
		if _, ok := left[kv.Lease]; !ok && kv.Lease != 0 {
			ttl, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
			case err != nil:
				return info, classify(fmt.Errorf("reading the lease of a permit of %q: %w", name, err))
			case ttl.TTL > 0:
				left[kv.Lease] = time.Duration(ttl.TTL) * time.Second
			}
		}
		info.Permits = append(info.Permits, fencelock.Info{Name: name, Held: true, Owner: owner, Count: len(h),
			Token: kv.CreateRevision, Remaining: left[kv.Lease], Meta: meta[owner]})
	}
	return info, nil
}
