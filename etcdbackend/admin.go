package etcdbackend

import (
	"context"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Namer          = (*Backend)(nil)
	_ driver.SemaphoreNamer = (*Backend)(nil)
	_ driver.ForceReleaser  = (*Backend)(nil)
)

// Names implements driver.Namer: the locks with a key in their queue whose names start with
// prefix.
func (b *Backend) Names(ctx context.Context, prefix string) ([]string, error) {
	return b.namesUnder(ctx, b.prefix, prefix)
}

// SemaphoreNames implements driver.SemaphoreNamer: the semaphores with a key in their line
// (a permit held or a waiter) whose names start with prefix.
func (b *Backend) SemaphoreNames(ctx context.Context, prefix string) ([]string, error) {
	return b.namesUnder(ctx, b.prefix+semRoot, prefix)
}

// namesUnder returns the names that start with prefix of the queues under root, whose keys are
// root, the escaped name, "/" and an owner ID.
func (b *Backend) namesUnder(ctx context.Context, root, prefix string) ([]string, error) {
	if err := b.open(); err != nil {
		return nil, err
	}
	// PathEscape maps each character on its own, so the escaped prefix is a prefix of every
	// escaped name that starts with prefix.
	resp, err := b.c.Get(ctx, root+url.PathEscape(prefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, classify(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, kv := range resp.Kvs {
		// An escaped name has no "/": the name ends at the first one, and the owner ID, which
		// may have some, follows. What does not escape back to itself is no queue's (the
		// metadata and semaphore keys under the lock's root).
		escaped, _, found := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/")
		name, err := url.PathUnescape(escaped)
		if !found || err != nil || url.PathEscape(name) != escaped || seen[name] || !strings.HasPrefix(name, prefix) {
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it deletes the holder's key, if it is still
// the holder the operator saw; the next waiter in the queue then holds the lock.
func (b *Backend) ForceRelease(ctx context.Context, name string) (driver.Info, error) {
	info, err := b.Inspect(ctx, name)
	if err != nil || !info.Held {
		return info, err
	}
	key := b.Key(name, info.Owner)
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", info.Token)).
		Then(clientv3.OpDelete(key), clientv3.OpDelete(b.metaKey(name, info.Owner))).
		Commit()
	if err != nil {
		return info, classify(err)
	}
	if !resp.Succeeded {
		return driver.Info{Name: name}, nil
	}
	return info, nil
}
