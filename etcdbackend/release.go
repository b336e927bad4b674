package etcdbackend

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
)

// Release implements fencelock.Backend. The last hold deletes the key in one transaction that
// compares its value; other holds rewrite the value in a transaction that compares the key's
// create and mod revisions. A lease with a Token releases only the owner's key made at that
// revision: a late release of an earlier lock of the owner leaves a later one alone.
//
// A release whose outcome stays unknown (the error matches fencelock.ErrUnavailable) is retried
// by the Backend with every keep-alive of its leases until it is done, since the key would
// otherwise live as long as the Backend keeps the lease alive.
func (b *Backend) Release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	n, err := b.release(ctx, lease, hold, lease.Token)
	if err != nil && !errors.Is(err, fencelock.ErrNotHeld) && !errors.Is(err, fencelock.ErrInvalid) {
		b.owe(owed{lease: lease, hold: hold, rev: lease.Token})
	}
	return n, err
}

// release takes hold out of the owner's key, the key made at revision rev when rev is not 0.
func (b *Backend) release(ctx context.Context, lease fencelock.Lease, hold string, rev int64) (int, error) {
	p := b.place(lease.Name, lease.Owner, lease.Limit)
	key := p.key
	deleteKey := []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(p.meta)}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", p.value(holds{hold}))}
	if rev != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", rev))
	}
	resp, err := b.c.Txn(ctx).If(cmps...).Then(deleteKey...).Else(clientv3.OpGet(key)).Commit()
	for {
		if err != nil {
			return 0, classify(err)
		}
		if resp.Succeeded {
			return 0, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || (rev != 0 && kvs[0].CreateRevision != rev) {
			if lease.Limit > 0 {
				return 0, fmt.Errorf("%w: no permit of semaphore %q is held by this owner in etcd", fencelock.ErrNotHeld, lease.Name)
			}
			return 0, fmt.Errorf("%w: %q is not held by this owner in etcd", fencelock.ErrNotHeld, lease.Name)
		}
		kv := kvs[0]
		// Not err: the rewrite below must set the err that the top of the loop reads.
		h, derr := p.holds(kv.Value)
		if derr != nil {
			return 0, derr
		}
		if !h.has(hold) {
			return len(h), nil // released already: a retry
		}
		rest := h.without(hold)
		ops := deleteKey
		if len(rest) > 0 {
			ops = []clientv3.Op{clientv3.OpPut(key, p.value(rest), clientv3.WithIgnoreLease())}
		}
		resp, err = b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
				clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(ops...).
			Else(clientv3.OpGet(key)).
			Commit()
		if err == nil && resp.Succeeded {
			return len(rest), nil
		}
	}
}
