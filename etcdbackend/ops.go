package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
)

// maxTxnOps is etcd's default limit of operations in one transaction.
const maxTxnOps = 128

// Renew implements fencelock.Backend. The Backend's keep-alive extends its leases in the
// background; Renew confirms, in one transaction per 128 locks, that each lock's key still
// exists, and the lock's validity is what is known of the lease the key is on (leaseUntil):
// what its last keep-alive vouched for, or, for a lease this Backend does not keep alive, what
// etcd reports left of it.
func (b *Backend) Renew(ctx context.Context, leases []fencelock.Lease) []fencelock.Renewal {
	begin := time.Now()
	out := make([]fencelock.Renewal, len(leases))
	known := map[clientv3.LeaseID]time.Time{} // what leaseUntil said, per call: keys share a few leases
	for lo := 0; lo < len(leases); lo += maxTxnOps {
		hi := min(lo+maxTxnOps, len(leases))
		b.renewBatch(ctx, begin, leases[lo:hi], out[lo:hi], known)
	}
	return out
}

func (b *Backend) renewBatch(ctx context.Context, begin time.Time, batch []fencelock.Lease, out []fencelock.Renewal, known map[clientv3.LeaseID]time.Time) {
	ops := make([]clientv3.Op, 0, len(batch))
	for i, l := range batch {
		if out[i].Err = b.usable(l.Name); out[i].Err == nil {
			ops = append(ops, clientv3.OpGet(b.place(l.Name, l.Owner, l.Limit).key))
		}
	}
	if len(ops) == 0 {
		return
	}
	resp, err := b.c.Txn(ctx).Then(ops...).Commit()
	k := 0
	for i, l := range batch {
		r := &out[i]
		if r.Err != nil {
			continue
		}
		if err != nil {
			r.Err = classify(err)
			continue
		}
		kvs := resp.Responses[k].GetResponseRange().Kvs
		k++
		if len(kvs) == 0 {
			r.Err = fmt.Errorf("%w: the key of %q is gone from etcd (lease expired or key deleted)", fencelock.ErrNotHeld, l.Name)
			continue
		}
		id := clientv3.LeaseID(kvs[0].Lease)
		until, ok := known[id]
		if !ok {
			if until, r.Err = b.leaseUntil(ctx, l.Name, id); r.Err != nil {
				continue // not kept: the error names its lock
			}
			known[id] = until
		}
		if !until.After(begin) {
			r.Err = fmt.Errorf("%w: no keep-alive of the lease of %q was confirmed in time", fencelock.ErrUnavailable, l.Name)
			continue
		}
		// The key was in place after begin, on a lease that lives until then.
		r.Validity = until.Sub(begin)
	}
}

// Release implements fencelock.Backend. The last hold deletes the key in one transaction that
// compares its value; other holds rewrite the value in a transaction that compares the key's
// create and mod revisions.
//
// A release whose outcome stays unknown (the error matches fencelock.ErrUnavailable) is retried
// by the Backend with every keep-alive of its leases until it is done, since the key would
// otherwise live as long as the Backend keeps the lease alive.
func (b *Backend) Release(ctx context.Context, lease fencelock.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	n, err := b.release(ctx, lease, hold, 0)
	if err != nil && !errors.Is(err, fencelock.ErrNotHeld) && !errors.Is(err, fencelock.ErrInvalid) {
		b.owe(owed{lease: lease, hold: hold})
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

// Inspect implements fencelock.Backend.
func (b *Backend) Inspect(ctx context.Context, name string) (fencelock.Info, error) {
	if err := b.usable(name); err != nil {
		return fencelock.Info{}, err
	}
	pfx := b.queuePrefix(name)
	resp, err := b.c.Get(ctx, pfx, clientv3.WithFirstCreate()...)
	if err != nil {
		return fencelock.Info{}, classify(err)
	}
	info := fencelock.Info{Name: name}
	if len(resp.Kvs) == 0 {
		return info, nil
	}
	kv := resp.Kvs[0]
	h, err := decodeHolds(kv.Value)
	if err != nil {
		return info, err
	}
	info.Held = true
	info.Owner = strings.TrimPrefix(string(kv.Key), pfx)
	info.Count = len(h)
	info.Token = kv.CreateRevision
	m, err := b.c.Get(ctx, b.metaKey(name, info.Owner))
	if err != nil {
		return info, classify(fmt.Errorf("reading the metadata of %q: %w", name, err))
	}
	if len(m.Kvs) > 0 {
		info.Meta = string(m.Kvs[0].Value)
	}
	if kv.Lease != 0 {
		ttl, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// The lease ended after the read: the key is going with it.
		case err != nil:
			return info, classify(fmt.Errorf("reading the lease of %q: %w", name, err))
		case ttl.TTL > 0:
			info.Remaining = time.Duration(ttl.TTL) * time.Second
		}
	}
	return info, nil
}
