package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// A queue is what the line of a lock and that of a semaphore differ in: the transaction that
// joins it, when a key holds, and how a waiter waits for its turn. enqueue is the rest, the
// same for both, so that a fix to the path of one is a fix to the other's.
type queue interface {
	// join runs the transaction that makes the owner's key on the lease of s, when the owner
	// has none and the line takes it, and reads the line.
	join(ctx context.Context, s *session) (joined, error)
	// holding says whether the key made at rev holds, by what join read of the line: the key
	// itself and every key ahead of it.
	holding(j joined, rev int64) (bool, error)
	// refused is the error that ends a request whose join made no key, before it waits or
	// re-enters; nil when the owner's key, if it has one, may be waited on and re-entered.
	refused(j joined) error
	// waitTurn waits in line until the key made at rev holds, starting from what join read, j,
	// and returns when the read, or the watch event, that found so was sent. ended closes when
	// the key's lease is known gone.
	waitTurn(ctx context.Context, ended <-chan struct{}, j joined, rev int64) (time.Time, error)
}

// joined is what a queue's join did and read.
type joined struct {
	made   bool
	rev    int64              // the transaction's revision: the key's create revision, when made
	mine   *mvccpb.KeyValue   // when not made, the owner's key, if there is one
	queued []*mvccpb.KeyValue // the line, oldest first, as far as join read it
	more   bool               // the line goes on past queued
}

// joinedOf is what a join's transaction, resp, did and read: whether it made the owner's key,
// and the replies of the branch that ran, ops: the put or the read of the owner's key, then
// the read of the line.
func joinedOf(resp *clientv3.TxnResponse, made bool, ops []*etcdserverpb.ResponseOp) joined {
	r := ops[1].GetResponseRange()
	j := joined{made: made, rev: resp.Header.Revision, queued: r.Kvs, more: r.More}
	if mine := ops[0].GetResponseRange().GetKvs(); !made && len(mine) > 0 {
		j.mine = mine[0]
	}
	return j
}

// enqueue takes req's place in the line of its lock or semaphore, and holds at once, or, with
// wait, waits there for its turn. A key it made and leaves without a grant it takes out of
// line.
func (b *Backend) enqueue(ctx context.Context, s *session, req driver.Request, wait bool, start time.Time) (driver.Grant, error) {
	p := b.place(req.Name, req.Owner, req.Limit)
	q := b.queueOf(req, p, wait)
	sent := time.Now()
	j, err := q.join(ctx, s)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return driver.Grant{}, err // refused: the put was not made
		}
		return driver.Grant{}, classify(err) // what it may have made is owed (see commit)
	}
	if j.made {
		ok, err := q.holding(j, j.rev)
		if err == nil && !ok {
			if !wait {
				err = held(p)
			} else {
				req.StartWait()
				sent, err = q.waitTurn(ctx, s.done, j, j.rev)
			}
		}
		if err != nil {
			b.leave(ctx, req, j.rev)
			return driver.Grant{}, err
		}
		return b.granted(ctx, req, s.id, j.rev, 1, start, sent)
	}

	// The owner has a key already: a reentrant acquisition, or the retry of one whose outcome
	// was lost. Or the line refused the key (see the queue's join).
	if err := q.refused(j); err != nil {
		return driver.Grant{}, err
	}
	if j.mine == nil {
		return driver.Grant{}, fmt.Errorf("%w: the owner's key vanished during the acquisition", driver.ErrUnavailable)
	}
	ok, err := q.holding(j, j.mine.CreateRevision)
	if err != nil {
		return driver.Grant{}, err
	}
	if !ok {
		if !wait {
			return driver.Grant{}, held(p)
		}
		ended := b.leaseEnded(clientv3.LeaseID(j.mine.Lease))
		req.StartWait()
		if sent, err = q.waitTurn(ctx, ended, j, j.mine.CreateRevision); err != nil {
			return driver.Grant{}, err
		}
	}
	return b.reenter(ctx, req, p, j.mine, start, sent)
}

// queueOf is the line req joins at p: its semaphore's, when it asks for a permit, else its
// lock's. wait says whether it will wait there.
func (b *Backend) queueOf(req driver.Request, p place, wait bool) queue {
	if p.limit > 0 {
		return permitQueue{b: b, req: req, p: p, pfx: b.semPrefix(req.Name)}
	}
	return lockQueue{b: b, req: req, p: p, pfx: b.queuePrefix(req.Name), wait: wait}
}
