package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/pause"
)

var _ driver.Semaphores = (*Backend)(nil)

// A semaphore of limit L is a queue as a lock's is, under a prefix of its own: each holder and
// waiter has a key on its session's lease, and a key holds its permits when they and those of
// every key created before it fit in L, so that no key passes one that came before it. A key's
// create revision is its permit's fencing token. A key's value is its limit and its holds
// ("L<limit>\n" and the holds as a lock's key has them, each hold that takes k > 1 permits as
// "<id>#<k>"; the key takes the most any hold asked for).
//
// Every key in the queue agrees on the limit: the transaction that makes a key makes it only
// when every key in the queue has its limit, so that a caller refused with a *LimitError
// leaves nothing behind for others to agree with, however its link or its goroutine fares
// after the answer. And a key holds only when its permits and those of every key before it
// fit in the smallest limit any of them has: were keys of two limits ever in line together
// (one left by a version that checked the oldest key alone), no holder would count against a
// limit larger than one a holder before it agreed to.

// place is where an owner's hold of a lock, or of a permit, is kept.
type place struct {
	key   string
	limit int // the semaphore's; 0 for a lock

	b           *Backend
	name, owner string
}

func (b *Backend) place(name, owner string, limit int) place {
	if limit > 0 {
		return place{key: b.PermitKey(name, owner), limit: limit, b: b, name: name, owner: owner}
	}
	return place{key: b.Key(name, owner), b: b, name: name, owner: owner}
}

// meta is the key of the metadata the owner published with its hold, if it did.
func (p place) meta() string {
	if p.limit > 0 {
		return p.b.semMetaPrefix(p.name) + p.owner
	}
	return p.b.metaKey(p.name, p.owner)
}

// semMetaPrefix is the prefix of the metadata keys of the semaphore name's permits.
func (b *Backend) semMetaPrefix(name string) string {
	return b.prefix + "!semmeta/" + url.PathEscape(name) + "/"
}

// PermitKey returns the key that owner's permit of the semaphore name, or its place in the
// semaphore's line, is kept under. Its create revision is the permit's fencing token.
func (b *Backend) PermitKey(name, owner string) string { return b.semPrefix(name) + owner }

// semRoot follows the Backend's prefix in the keys of every semaphore. It starts with "!", as
// the metadata keys do, so that no lock's queue prefix is a prefix of it.
const semRoot = "!sem/"

// semPrefix is the prefix of the keys of the semaphore name.
func (b *Backend) semPrefix(name string) string {
	return b.prefix + semRoot + url.PathEscape(name) + "/"
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
		return 0, nil, fmt.Errorf("%w: a semaphore key holds %q, which fencelock did not write", driver.ErrInvalid, v)
	}
	h, err := decodeHolds([]byte(rest))
	return limit, h, err
}

// permitQueue is a semaphore's line: a key holds its permits when those of every key before it
// and its own fit in the limit.
type permitQueue struct {
	b   *Backend
	req driver.Request
	p   place
	pfx string
}

// join makes the owner's key in the semaphore's queue, p, when the owner has none and every
// key in the queue agrees with req's limit — or the queue is empty, which no comparison of the
// keys' values can tell (etcd fails a comparison of a value over a range with no key), so that
// a nested transaction asks. Either way it reads the whole queue, oldest first.
func (q permitQueue) join(ctx context.Context, s *session) (joined, error) {
	b, req, p, pfx := q.b, q.req, q.p, q.pfx
	line := clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	then := []clientv3.Op{clientv3.OpPut(p.key, p.value(holds{entry(req.Hold, req.Weight)}), clientv3.WithLease(s.id)), line}
	if req.Meta != "" {
		then = append(then, clientv3.OpPut(p.meta(), req.Meta, clientv3.WithLease(s.id)))
	}
	// A key of limit L has a value that starts with "L<L>\n": greater than that, and less than
	// the same with the newline's successor.
	agree := "L" + strconv.Itoa(req.Limit) + "\n"
	a := b.newAttempt(s.id)
	onlyIfEmpty := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix(), a.unvetoed()},
		then,
		[]clientv3.Op{clientv3.OpGet(p.key), line})
	resp, err := b.commit(ctx, req, a, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0), a.unvetoed(),
				clientv3.Compare(clientv3.Value(pfx), ">", agree).WithPrefix(),
				clientv3.Compare(clientv3.Value(pfx), "<", agree[:len(agree)-1]+"\v").WithPrefix()).
			Then(then...).
			Else(onlyIfEmpty).
			Commit()
	}, func(resp *clientv3.TxnResponse) int64 {
		made, _ := joinedPermit(resp)
		if made {
			return resp.Header.Revision
		}
		return 0
	})
	if err != nil {
		return joined{}, err
	}
	made, ops := joinedPermit(resp)
	return joinedOf(resp, made, ops), nil
}

func (q permitQueue) holding(j joined, rev int64) (bool, error) { return holder(j.queued, rev) }

// refused refuses a permit whose limit is not the line's, or not that of its owner's key, and
// one that asks for more permits than that key takes (driver.ErrUpgrade: refused at once,
// never waited for).
func (q permitQueue) refused(j joined) error {
	req := q.req
	if j.mine == nil {
		return agreed(req, j.queued)
	}
	limit, h, err := decodePermit(j.mine.Value)
	switch {
	case err != nil:
		return err
	case limit != req.Limit:
		return &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: limit}
	case max(req.Weight, 1) > h.weight():
		return fmt.Errorf("%w: %q: this owner holds %d permits and asks for %d", driver.ErrUpgrade, req.Name, h.weight(), max(req.Weight, 1))
	}
	return nil
}

// waitTurn reads the line again rather than start from the join's read: a permit waiter's
// watch must exist before the read it counts on (see waitPermit).
func (q permitQueue) waitTurn(ctx context.Context, ended <-chan struct{}, _ joined, rev int64) (time.Time, error) {
	return q.b.waitPermit(ctx, ended, q.pfx, q.p.key, rev)
}

// joinedPermit reads the reply of permitQueue.join's transaction: whether it made the key,
// and the replies of the branch that ran.
func joinedPermit(resp *clientv3.TxnResponse) (bool, []*etcdserverpb.ResponseOp) {
	if resp.Succeeded {
		return true, resp.Responses
	}
	nested := resp.Responses[0].GetResponseTxn()
	return nested.Succeeded, nested.Responses
}

// agreed says whether req's limit is that of every key in the queue.
func agreed(req driver.Request, queue []*mvccpb.KeyValue) error {
	for _, kv := range queue {
		limit, _, err := decodePermit(kv.Value)
		if err != nil {
			return err
		}
		if limit != req.Limit {
			return &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: limit}
		}
	}
	return nil
}

// holder says whether the key made at rev holds its permits: the queue, oldest first, holds
// it, and its permits and those of every key before it fit in the smallest limit any of them
// has. The keys before it that wait count too: a key never passes one that came before it.
func holder(queue []*mvccpb.KeyValue, rev int64) (bool, error) {
	used, least := 0, math.MaxInt
	for _, kv := range queue {
		limit, h, err := decodePermit(kv.Value)
		if err != nil {
			return false, err
		}
		used, least = used+h.weight(), min(least, limit)
		if used > least {
			return false, nil // and no key after it holds either
		}
		if kv.CreateRevision == rev {
			return true, nil
		}
	}
	return false, nil
}

// entry is a hold's entry in a permit key's holds: its ID, and the permits it takes when more
// than one ("<id>#<n>").
func entry(id string, weight int) string {
	if weight <= 1 {
		return id
	}
	return id + "#" + strconv.Itoa(weight)
}

// weight is the permits a key with holds h takes: the most any of its holds asked for.
func (h holds) weight() int {
	w := 1
	for _, e := range h {
		if _, n, ok := strings.Cut(e, "#"); ok {
			if k, err := strconv.Atoi(n); err == nil {
				w = max(w, k)
			}
		}
	}
	return w
}

// waitPermit waits until the permits of the keys of the queue created before the waiter's,
// made at rev, and the waiter's own fit in the smallest limit any of them has (see holder).
// It watches the queue from before each read, so that no deletion, nor a holder giving
// permits back (a write lock released under a read lock), passes unseen, and returns when the
// read that found so was sent. ended closes when the lease of the waiter's key is known to be
// gone.
func (b *Backend) waitPermit(ctx context.Context, ended <-chan struct{}, pfx, key string, rev int64) (time.Time, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var wch clientv3.WatchChan
	for {
		if wch == nil {
			// The watch starts at the current revision (see waitDelete); the read below comes
			// after it exists.
			wch = b.c.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			if err := waitCreated(ctx, ended, wch); err != nil {
				return time.Now(), err
			}
		}
		sent := time.Now()
		resp, err := b.c.Txn(ctx).Then(
			// Keys, not a count: etcd counts a range before its revision filter.
			clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev-1)),
			clientv3.OpGet(key),
		).Commit()
		if err != nil {
			return sent, classify(err)
		}
		mine := resp.Responses[1].GetResponseRange().Kvs
		if len(mine) == 0 || mine[0].CreateRevision != rev {
			return sent, errWaiterLapsed
		}
		ahead := resp.Responses[0].GetResponseRange().Kvs
		if ok, err := holder(append(ahead, mine[0]), rev); err != nil || ok {
			return sent, err
		}
		// Until a key ahead is deleted or changed, any of which may give the waiter its permits,
		// or its own key changes. The keys ahead are all there: no key made later stands
		// before it. A key behind it, joining or leaving, gives it nothing.
		watched := make(map[string]bool, len(ahead)+1)
		for _, kv := range ahead {
			watched[string(kv.Key)] = true
		}
		watched[key] = true
	events:
		for {
			select {
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					// Broken (no leader, a compaction): watch again, then read again, a
					// moment later so that a cluster without a leader is not flooded.
					wch = nil
					if !pause.For(ctx, 100*time.Millisecond) {
						return sent, ctx.Err()
					}
					break events
				}
				if slices.ContainsFunc(wr.Events, func(ev *clientv3.Event) bool { return watched[string(ev.Kv.Key)] }) {
					break events
				}
			case <-ended:
				return sent, errWaiterLapsed
			case <-ctx.Done():
				return sent, ctx.Err()
			}
		}
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
			return errWaiterLapsed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// InspectSemaphore implements driver.Semaphores. The token it reports is the newest key's
// create revision: etcd keeps no counter of its own.
func (b *Backend) InspectSemaphore(ctx context.Context, name string) (driver.SemaphoreInfo, error) {
	info := driver.SemaphoreInfo{Name: name}
	if err := b.usable(name); err != nil {
		return info, err
	}
	pfx := b.semPrefix(name)
	metaPfx := b.semMetaPrefix(name)
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
	info.Token = kvs[len(kvs)-1].CreateRevision
	left := map[int64]time.Duration{}
	least := math.MaxInt
	for i, kv := range kvs {
		limit, h, err := decodePermit(kv.Value)
		if err != nil {
			return info, err
		}
		if i == 0 {
			info.Limit = limit
		}
		if least = min(least, limit); info.InUse+h.weight() > least {
			// This one waits, and so does every later one: none passes one before it.
			info.Waiting = len(kvs) - i
			break
		}
		info.InUse += h.weight()
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
		info.Permits = append(info.Permits, driver.Info{Name: name, Held: true, Owner: owner, Count: len(h),
			Token: kv.CreateRevision, Remaining: left[kv.Lease], Meta: meta[owner], Weight: h.weight()})
	}
	return info, nil
}
