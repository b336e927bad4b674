package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// Acquire implements driver.Backend: one attempt, leaving no key behind when the lock is
// held by another owner.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return b.acquire(ctx, req, false)
}

// AcquireQueued implements driver.Queue: the request takes its place in the lock's queue and
// waits for the deletion of the key just before its own.
func (b *Backend) AcquireQueued(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return b.acquire(ctx, req, true)
}

func (b *Backend) acquire(ctx context.Context, req driver.Request, queue bool) (driver.Grant, error) {
	if err := b.usable(req.Name); err != nil {
		return driver.Grant{}, err
	}
	start := time.Now()
	// The retry of an acquisition whose outcome was lost may find its key in place, with its
	// hold, and take it back: no release owed of that hold may run meanwhile, or after.
	claimed, err := b.claim(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	for attempt := 0; ; attempt++ {
		s, err := b.session(ctx, req.TTL)
		if err != nil {
			b.unclaim(claimed, false)
			return driver.Grant{}, err
		}
		g, err := b.enqueue(ctx, s, req, queue, start)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			// The lease expired between the lookup and the put: take a new one.
			b.dropSession(s)
			continue
		}
		b.unclaim(claimed, err == nil)
		return g, err
	}
}

// lockQueue is a lock's line: the owner whose key is the first holds the lock.
type lockQueue struct {
	b    *Backend
	req  driver.Request
	p    place
	pfx  string
	wait bool
}

// join makes the owner's key in the lock's queue and reads the head of the queue; for a
// request that will wait in line, when the line is short, every key ahead of its own too (see
// waitTurn). One attempt uses the head alone. A fresh owner's first hold waiting in line finds
// no key of its owner (see driver.Request.Hold) but for a rare exception, read after the fact:
// its transaction does without the Else branch.
func (q lockQueue) join(ctx context.Context, s *session) (joined, error) {
	b, req, key := q.b, q.req, q.p.key
	lineLen := int64(1)
	if q.wait {
		lineLen = watchAllUpTo + 1
	}
	first := clientv3.OpGet(q.pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(lineLen))
	then := []clientv3.Op{clientv3.OpPut(key, holds{req.Hold}.encode(), clientv3.WithLease(s.id)), first}
	if req.Meta != "" {
		then = append(then, clientv3.OpPut(q.p.meta(), req.Meta, clientv3.WithLease(s.id)))
	}
	a := b.newAttempt(s.id)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0), a.unvetoed()}
	if !q.wait {
		// One attempt joins only an empty queue: a key that joined a held lock only to leave
		// again would stand at the head between the holder's release and its own deletion,
		// and every attempt in between would be told the lock is held when no one holds it.
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(q.pfx), "=", 0).WithPrefix())
	}
	fresh := q.wait && req.Hold == ""
	resp, err := b.commit(ctx, req, a, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		txn := b.c.Txn(ctx).If(cmps...).Then(then...)
		if !fresh {
			txn = txn.Else(clientv3.OpGet(key), first)
		}
		return txn.Commit()
	}, madeKey)
	made := err == nil && resp.Succeeded
	if err == nil && fresh && !made {
		// The owner has a key: another Client's under the same owner, or this one's, made by
		// an attempt whose reply was lost. Read what the Else branch would have.
		resp, err = b.c.Txn(ctx).Then(clientv3.OpGet(key), first).Commit()
	}
	if err != nil {
		return joined{}, err
	}
	return joinedOf(resp, made, resp.Responses), nil
}

func (q lockQueue) holding(j joined, rev int64) (bool, error) {
	return len(j.queued) > 0 && j.queued[0].CreateRevision == rev, nil
}

// refused finds the lock held when one attempt's join found no key of its owner: it joins only
// an empty queue.
func (q lockQueue) refused(j joined) error {
	if j.mine == nil && !q.wait {
		return held(q.p)
	}
	return nil
}

// waitTurn starts from the line the join read, when it made the key and read the whole line.
func (q lockQueue) waitTurn(ctx context.Context, ended <-chan struct{}, j joined, rev int64) (time.Time, error) {
	var known *line
	if n := len(j.queued); j.made && n > 0 && !j.more && j.queued[n-1].CreateRevision == rev {
		known = &line{ahead: j.queued[:n-1], seen: rev} // the whole queue: all but the last, its own
	}
	return q.b.waitTurn(ctx, ended, q.pfx, q.p.key, rev, known)
}

// madeKey says which key a transaction that makes the owner's key if it can made: the one
// made at its revision, when it succeeded.
func madeKey(resp *clientv3.TxnResponse) int64 {
	if resp.Succeeded {
		return resp.Header.Revision
	}
	return 0
}

// reenter adds req's hold to the owner's key at p, unless a retried acquisition added it
// already. The key stays on the lease it was made with, which may be of another TTL, or
// another Backend's: the grant's validity is that lease's.
func (b *Backend) reenter(ctx context.Context, req driver.Request, p place, kv *mvccpb.KeyValue, start, sent time.Time) (driver.Grant, error) {
	hold, key := req.Hold, p.key
	for {
		h, err := p.holds(kv.Value)
		if err != nil {
			return driver.Grant{}, err
		}
		if h.has(hold) {
			return b.granted(ctx, req, clientv3.LeaseID(kv.Lease), kv.CreateRevision, len(h), start, sent)
		}
		h = append(h, entry(hold, req.Weight))
		sent = time.Now()
		// Vetoed on the key's lease: once that is gone, so is the key, and no write that
		// compares its create revision is ever applied.
		a := b.newAttempt(clientv3.LeaseID(kv.Lease))
		a.rev = kv.CreateRevision
		resp, err := b.commit(ctx, req, a, func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return b.c.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
					clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision), a.unvetoed()).
				Then(clientv3.OpPut(key, p.value(h), clientv3.WithIgnoreLease())).
				Else(clientv3.OpGet(key)).
				Commit()
		}, func(resp *clientv3.TxnResponse) int64 {
			if resp.Succeeded {
				return kv.CreateRevision
			}
			return 0
		})
		if err != nil {
			return driver.Grant{}, classify(err) // what it may have added is owed (see commit)
		}
		if resp.Succeeded {
			return b.granted(ctx, req, clientv3.LeaseID(kv.Lease), kv.CreateRevision, len(h), start, sent)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != kv.CreateRevision {
			return driver.Grant{}, fmt.Errorf("%w: the owner's key vanished during a reentrant acquisition", driver.ErrNotObtained)
		}
		kv = kvs[0] // changed by another hold of the same owner: try again
	}
}

// granted is the grant of req's hold in the key made at rev, on lease, made or found in place
// by the request sent at sent: the store keeps it while the lease lives. A grant it cannot
// vouch for is not handed out, and the hold's release is owed.
func (b *Backend) granted(ctx context.Context, req driver.Request, lease clientv3.LeaseID, rev int64, count int, start, sent time.Time) (driver.Grant, error) {
	until, err := b.leaseUntil(ctx, req.Name, lease)
	if err == nil && !until.After(sent) {
		err = fmt.Errorf("%w: nothing vouches for the lease of %q beyond the grant", driver.ErrUnavailable, req.Name)
	}
	if err != nil {
		b.unsure(req, rev)
		return driver.Grant{}, err
	}
	return driver.Grant{Token: rev, Count: count, Validity: until.Sub(sent), Elapsed: sent.Sub(start)}, nil
}

// held is the error for a lock held by another owner, or a semaphore whose permits are taken,
// at p. It leaves the holder's remaining TTL unknown: finding it would cost another round
// trip, and Obtain waits in the queue instead.
func held(p place) error { return &driver.HeldError{Name: p.name, Limit: p.limit} }

// leave takes a waiter's hold, in the key made at rev, out of line: under ctx while it lasts,
// else, or when that fails, by the settler at once, so that the caller returns by its deadline.
func (b *Backend) leave(ctx context.Context, req driver.Request, rev int64) {
	if ctx.Err() == nil {
		_, err := b.release(ctx, leaseOf(req), req.Hold, rev)
		if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrInvalid) {
			return
		}
	}
	b.unsure(req, rev)
}

// unsure owes the release of req's hold, in the key made at rev (0: whichever key the owner
// has), after an acquisition that failed with its outcome unknown: its put may have been
// applied with the reply lost, or its grant could not be vouched for. Left alone, the key would
// sit on a lease this Backend keeps alive, holding the lock or a place in line for no one until
// the Backend closed, unless the caller undid the acquisition (the Client does; a caller of
// the Backend's own may not). A release of a hold that is not there is done at once.
func (b *Backend) unsure(req driver.Request, rev int64) {
	b.owed.Owe(owed{lease: leaseOf(req), hold: req.Hold, rev: rev}, nil)
}

func leaseOf(req driver.Request) driver.Lease {
	return driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL, Limit: req.Limit}
}

// watchAllUpTo is how many keys ahead a waiter watches at once. A waiter with no more ahead
// than that watches the queue and is granted on the last of their deletions, with no read in
// between; one further back watches only the key just before it, so that each owner change
// wakes a bounded number of waiters however long the line.
var watchAllUpTo int64 = 16

// line is what a read found of the queue before a waiter's key: the nearest keys ahead, up
// to watchAllUpTo, whether there are more, and the revision it was read at.
type line struct {
	ahead []*mvccpb.KeyValue
	more  bool
	seen  int64
}

// waitTurn waits until no key of the queue was created before the waiter's, made at rev,
// starting from known when the waiter's own transaction read the line already. It returns
// when the read that found no key ahead was sent, or when the watch reported the deletion of
// the last key ahead: no key made after the waiter's can stand before it, so the set of keys
// ahead only shrinks, and the read that would confirm it is a round trip saved on the path of
// every owner change. (Whether its own key is still there the read would not settle either: a
// key deleted just after it is as gone. The key lives as long as its lease, which the grant's
// validity is bounded by.) ended closes when that lease is known gone.
func (b *Backend) waitTurn(ctx context.Context, ended <-chan struct{}, pfx, key string, rev int64, known *line) (time.Time, error) {
	for {
		sent := time.Now()
		l := known
		if known = nil; l == nil {
			var err error
			if l, err = b.ahead(ctx, pfx, key, rev); err != nil || len(l.ahead) == 0 {
				return sent, err
			}
		}
		if l.more {
			if err := b.waitDelete(ctx, ended, l.ahead[0], l.seen); err != nil {
				return sent, err
			}
			continue
		}
		if heard, err := b.waitAll(ctx, ended, pfx, key, rev, l); err != nil || !heard.IsZero() {
			return heard, err
		}
	}
}

// ahead reads the line before the waiter's key, made at rev, the nearest key first, and
// checks that the waiter's own key is still there.
func (b *Backend) ahead(ctx context.Context, pfx, key string, rev int64) (*line, error) {
	resp, err := b.c.Txn(ctx).Then(
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(rev-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(watchAllUpTo)),
		clientv3.OpGet(key, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, classify(err)
	}
	if mine := resp.Responses[1].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != rev {
		return nil, errWaiterLapsed
	}
	r := resp.Responses[0].GetResponseRange()
	return &line{ahead: r.Kvs, more: r.More, seen: resp.Header.Revision}, nil
}

// waitAll waits until every key ahead in l, the whole line before the waiter's key, is
// deleted, and returns when the watch reported the last deletion, or when a read found none
// left; zero when the watch broke (the caller reads again). The watch starts at the current
// revision (see waitDelete): if that is past the line's, a read after the watch exists tells
// what went meanwhile. The waiter's own key deleted (its lease expired) ends the wait.
func (b *Backend) waitAll(ctx context.Context, ended <-chan struct{}, pfx, key string, rev int64, l *line) (time.Time, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := b.c.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	left, seen := keySet(l.ahead), l.seen
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return time.Time{}, nil
			}
			if wr.Created && wr.Header.Revision > seen {
				sent := time.Now()
				now, err := b.ahead(ctx, pfx, key, rev)
				if err != nil || len(now.ahead) == 0 {
					return sent, err
				}
				left, seen = keySet(now.ahead), now.seen
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= seen {
					continue
				}
				if k := string(ev.Kv.Key); k == key {
					return time.Time{}, errWaiterLapsed
				} else if left[k] {
					delete(left, k)
					if len(left) == 0 {
						return time.Now(), nil
					}
				}
			}
		case <-ended:
			return time.Time{}, errWaiterLapsed
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// keySet is the set of the keys of kvs.
func keySet(kvs []*mvccpb.KeyValue) map[string]bool {
	set := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		set[string(kv.Key)] = true
	}
	return set
}

// waitDelete waits until pred, a key that existed at revision seen, is deleted, or the watch
// broke: the caller reads again either way. A key of the same name made since is
// another: an owner whose lock was released may be given to the next acquisition (see
// ReusesOwners), and its new key stands behind the waiter. The first deletion the watch
// reports is pred's: the watch was made at a revision where pred, that incarnation, was there,
// or the read after its creation returned.
//
// The watch starts at the current revision, never at an older one: etcd serves a watch that
// starts in the past from a catch-up loop that runs every 100 ms, and hands it no new event
// until it caught up — which is why a waiter of etcd's own Mutex takes about 100 ms to learn of
// a release. Starting at seen+1 is not enough on a busy cluster, where other writes move the
// revision on between the read and the watch. A deletion between the read and the watch's
// creation is caught by reading the key again once the watch exists.
func (b *Backend) waitDelete(ctx context.Context, ended <-chan struct{}, pred *mvccpb.KeyValue, seen int64) error {
	key := string(pred.Key)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := b.c.Watch(wctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return nil // the watch broke
			}
			if wr.Created && wr.Header.Revision > seen {
				resp, err := b.c.Get(ctx, key, clientv3.WithKeysOnly())
				if err != nil {
					return classify(err)
				}
				if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != pred.CreateRevision {
					return nil
				}
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		case <-ended:
			return errWaiterLapsed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
