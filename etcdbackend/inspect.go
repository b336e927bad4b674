package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// Inspect implements driver.Backend. The holder's metadata is read at the revision its key
// was read at, and only the metadata made with that key counts: owner IDs are reused (see
// ReusesOwners), and a later read would find what the owner published for its next lock, or
// nothing once it released this one. Metadata made before the key is an earlier lock's.
func (b *Backend) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := b.usable(name); err != nil {
		return driver.Info{}, err
	}
	pfx := b.queuePrefix(name)
	var kv *mvccpb.KeyValue
	var meta []*mvccpb.KeyValue
	for {
		resp, err := b.c.Get(ctx, pfx, clientv3.WithFirstCreate()...)
		if err != nil {
			return driver.Info{}, classify(err)
		}
		if len(resp.Kvs) == 0 {
			return driver.Info{Name: name}, nil
		}
		kv = resp.Kvs[0]
		owner := strings.TrimPrefix(string(kv.Key), pfx)
		m, err := b.c.Get(ctx, b.metaKey(name, owner), clientv3.WithRev(resp.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted in between: read both again
		}
		if err != nil {
			return driver.Info{}, classify(fmt.Errorf("reading the metadata of %q: %w", name, err))
		}
		meta = m.Kvs
		break
	}
	info := driver.Info{Name: name}
	h, err := decodeHolds(kv.Value)
	if err != nil {
		return info, err
	}
	info.Held = true
	info.Owner = strings.TrimPrefix(string(kv.Key), pfx)
	info.Count = len(h)
	info.Token = kv.CreateRevision
	if len(meta) > 0 && meta[0].CreateRevision >= kv.CreateRevision {
		// Made with the key, in its transaction, or by a Publish while the key lived: one made
		// before it is left from an earlier lock of the same owner.
		info.Meta = string(meta[0].Value)
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

var _ driver.LineLister = (*Backend)(nil)

// Line implements driver.LineLister: the keys of the lock's queue after the first, in the
// order of their creation, with their metadata read at the same revision (only metadata made
// with or after each key counts, as in Inspect).
func (b *Backend) Line(ctx context.Context, name string) ([]driver.Info, error) {
	if err := b.usable(name); err != nil {
		return nil, err
	}
	pfx := b.queuePrefix(name)
	for {
		resp, err := b.c.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return nil, classify(err)
		}
		if len(resp.Kvs) < 2 {
			return nil, nil
		}
		mpfx := b.prefix + "!meta/" + url.PathEscape(name) + "/"
		m, err := b.c.Get(ctx, mpfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted in between: read both again
		}
		if err != nil {
			return nil, classify(fmt.Errorf("reading the metadata of %q: %w", name, err))
		}
		meta := make(map[string]*mvccpb.KeyValue, len(m.Kvs))
		for _, kv := range m.Kvs {
			meta[strings.TrimPrefix(string(kv.Key), mpfx)] = kv
		}
		out := make([]driver.Info, 0, len(resp.Kvs)-1)
		for _, kv := range resp.Kvs[1:] {
			info := driver.Info{Name: name, Owner: strings.TrimPrefix(string(kv.Key), pfx)}
			if mk := meta[info.Owner]; mk != nil && mk.CreateRevision >= kv.CreateRevision {
				info.Meta = string(mk.Value)
			}
			out = append(out, info)
		}
		return out, nil
	}
}
