package etcdbackend

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// Release implements driver.Backend. The last hold deletes the key in one transaction that
// compares its value; other holds rewrite the value in a transaction that compares the key's
// create and mod revisions. A lease with a Token releases only the owner's key made at that
// revision: a late release of an earlier lock of the owner leaves a later one alone.
//
// A release whose outcome stays unknown (the error matches driver.ErrUnavailable) is retried
// by the Backend with every keep-alive of its leases (every second when none runs) until it is
// done, since the key would otherwise live as long as the Backend keeps the lease alive. A
// release of a hold whose acquisition is still in flight (its caller left before its write's
// outcome was known) waits for that outcome first, within ctx.
func (b *Backend) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	if landed := b.inFlight(lease, hold); landed != nil {
		// An acquisition of this hold whose caller left: what its write made is found only
		// once it landed (see flight), and is owed by then if it did.
		select {
		case <-landed:
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: the acquisition of this hold is still in flight: %w", driver.ErrUnavailable, ctx.Err())
		}
	}
	n, err := b.release(ctx, lease, hold, lease.Token)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) && !errors.Is(err, driver.ErrInvalid) {
		b.owed.Owe(owed{lease: lease, hold: hold, rev: lease.Token}, nil)
	}
	return n, err
}

// release takes hold out of the owner's key, the key made at revision rev when rev is not 0.
func (b *Backend) release(ctx context.Context, lease driver.Lease, hold string, rev int64) (int, error) {
	p := b.place(lease.Name, lease.Owner, lease.Limit)
	key := p.key
	deleteKey := []clientv3.Op{clientv3.OpDelete(key)}
	if hold != "" || !lease.NoMeta {
		deleteKey = append(deleteKey, clientv3.OpDelete(p.meta()))
	} // else the fresh owner's first hold made the key, and published no metadata with it
	var kv *mvccpb.KeyValue
	var done bool
	var err error
	if hold == "" && rev != 0 && lease.Holds == 0 {
		// The path every lock takes. The fresh owner's first hold made the key at rev (see
		// driver.Request.Hold), and its caller has no other hold of it: a key no write
		// changed since rev is that key with that hold alone. One compare, and no read of the
		// key unless it changed — another holder under the same owner.
		var resp *clientv3.TxnResponse
		resp, err = b.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(deleteKey...).Commit()
		if done = err == nil && resp.Succeeded; err == nil && !done {
			kv, err = b.get(ctx, key)
		}
	} else {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", p.value(holds{hold}))}
		if rev != 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", rev))
		}
		done, kv, err = b.write(ctx, key, cmps, deleteKey)
	}
	for {
		if err != nil {
			return 0, classify(err)
		}
		if done {
			return 0, nil
		}
		if kv == nil || (rev != 0 && kv.CreateRevision != rev) {
			if lease.Limit > 0 {
				return 0, fmt.Errorf("%w: no permit of semaphore %q is held by this owner in etcd", driver.ErrNotHeld, lease.Name)
			}
			return 0, fmt.Errorf("%w: %q is not held by this owner in etcd", driver.ErrNotHeld, lease.Name)
		}
		// Not err: the write below must set the err that the top of the loop reads.
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
		done, kv, err = b.write(ctx, key, []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision),
		}, ops)
		if err == nil && done {
			return len(rest), nil
		}
	}
}

// write runs ops on key if cmps hold; if not, it returns the key as it is (nil if there is none).
func (b *Backend) write(ctx context.Context, key string, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, *mvccpb.KeyValue, error) {
	resp, err := b.c.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(key)).Commit()
	if err != nil || resp.Succeeded {
		return err == nil, nil, err
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return false, kvs[0], nil
	}
	return false, nil, nil
}

// get returns key as it is, nil if there is none.
func (b *Backend) get(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	resp, err := b.c.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return resp.Kvs[0], nil
}

var _ driver.Publisher = (*Backend)(nil)

// Publish implements driver.Publisher: the holder's metadata key is written (deleted for
// empty metadata) on the lease of its lock's key, in a transaction that holds only while that
// key is the one made at lease.Token. The watches of WatchHolder see the write. A permit's
// metadata cannot be changed.
func (b *Backend) Publish(ctx context.Context, lease driver.Lease, meta string) error {
	if err := b.usable(lease.Name); err != nil {
		return err
	}
	key := b.Key(lease.Name, lease.Owner)
	resp, err := b.c.Get(ctx, key)
	if err != nil {
		return classify(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != lease.Token {
		return fmt.Errorf("%w: %q is not held by this owner under token %d in etcd", driver.ErrNotHeld, lease.Name, lease.Token)
	}
	op := clientv3.OpDelete(b.metaKey(lease.Name, lease.Owner))
	if meta != "" {
		op = clientv3.OpPut(b.metaKey(lease.Name, lease.Owner), meta, clientv3.WithLease(clientv3.LeaseID(resp.Kvs[0].Lease)))
	}
	txn, err := b.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", lease.Token)).Then(op).Commit()
	switch {
	case err != nil:
		return classify(err)
	case !txn.Succeeded:
		return fmt.Errorf("%w: %q is not held by this owner under token %d in etcd", driver.ErrNotHeld, lease.Name, lease.Token)
	}
	return nil
}
