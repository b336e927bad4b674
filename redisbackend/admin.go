package redisbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
)

var (
	_ fencelock.Lister        = (*Backend)(nil)
	_ fencelock.ForceReleaser = (*Backend)(nil)
)

// List implements fencelock.Lister with SCAN over every master; it sees the locks held when
// each key was scanned, not one instant.
func (b *Backend) List(ctx context.Context, prefix string) ([]fencelock.Info, error) {
	if err := b.open(); err != nil {
		return nil, err
	}
	match := globEscape(b.prefix+"{"+prefix) + "*}"
	var names []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 512).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			// Lock keys are <prefix>{name}; fence counters end in :fence.
			names = append(names, k[len(b.prefix)+1:len(k)-1])
		}
		return iter.Err()
	}
	var err error
	switch c := b.c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster runs the callbacks concurrently
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, m)
		})
	case redis.Cmdable:
		err = scan(ctx, c)
	default:
		return nil, fmt.Errorf("%w: listing needs a go-redis client that can SCAN", fencelock.ErrInvalid)
	}
	if err != nil {
		return nil, classify(err)
	}
	out := make([]fencelock.Info, 0, len(names))
	for _, n := range names {
		info, err := b.Inspect(ctx, n)
		if err != nil {
			return out, err
		}
		if info.Held {
			out = append(out, info)
		}
	}
	return out, nil
}

// globEscape escapes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// ForceRelease implements fencelock.ForceReleaser: it ends the lock whoever holds it and hands
// it to the first waiter in line, or wakes the waiters of ReleaseWatcher. The fence counter stays, so the next token is still greater.
func (b *Backend) ForceRelease(ctx context.Context, name string) (fencelock.Info, error) {
	info, err := b.Inspect(ctx, name)
	if err != nil || !info.Held {
		return info, err
	}
	publish := "PUBLISH"
	if b.sharded {
		publish = "SPUBLISH"
	}
	n, err := forceScript.Run(ctx, b.c, b.queueKeys(name), info.Owner, publish, b.retentionArg).Int64()
	if err != nil {
		return info, classify(err)
	}
	if n == 0 {
		return fencelock.Info{Name: name}, nil // released or changed hands meanwhile
	}
	return info, nil
}
