package etcdbackend

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// maxTxnOps is etcd's default limit of operations in one transaction.
const maxTxnOps = 128

// Renew implements driver.Backend. The Backend's keep-alive extends its leases in the
// background; Renew confirms, in one transaction per 128 locks, that each lock's key still
// exists, and the lock's validity is what is known of the lease the key is on (leaseUntil):
// what its last keep-alive vouched for, or, for a lease this Backend does not keep alive, what
// etcd reports left of it.
func (b *Backend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	begin := time.Now()
	out := make([]driver.Renewal, len(leases))
	known := map[clientv3.LeaseID]time.Time{} // what leaseUntil said, per call: keys share a few leases
	for lo := 0; lo < len(leases); lo += maxTxnOps {
		hi := min(lo+maxTxnOps, len(leases))
		b.renewBatch(ctx, begin, leases[lo:hi], out[lo:hi], known)
	}
	return out
}

func (b *Backend) renewBatch(ctx context.Context, begin time.Time, batch []driver.Lease, out []driver.Renewal, known map[clientv3.LeaseID]time.Time) {
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
			r.Err = fmt.Errorf("%w: the key of %q is gone from etcd (lease expired or key deleted)", driver.ErrNotHeld, l.Name)
			continue
		}
		if l.Token != 0 && kvs[0].CreateRevision != l.Token {
			// A later lock of the same owner: the one renewed is gone.
			r.Err = fmt.Errorf("%w: the owner's key of %q was made again (token %d, not %d)", driver.ErrNotHeld, l.Name, kvs[0].CreateRevision, l.Token)
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
			r.Err = fmt.Errorf("%w: no keep-alive of the lease of %q was confirmed in time", driver.ErrUnavailable, l.Name)
			continue
		}
		// The key was in place after begin, on a lease that lives until then.
		r.Validity = until.Sub(begin)
	}
}
