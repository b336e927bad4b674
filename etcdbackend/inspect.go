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
