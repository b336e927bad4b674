package zkbackend

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

var (
	_ driver.Namer         = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
)

// Names implements driver.Namer: the locks under the root whose names start with prefix.
func (b *Backend) Names(ctx context.Context, prefix string) ([]string, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := b.children(ctx, b.root)
	switch {
	case err == zk.ErrNoNode:
		return nil, nil
	case err != nil:
		return nil, classify(err)
	}
	var out []string
	for _, name := range names {
		if strings.HasPrefix(name, prefix) && checkName(name) == nil {
			out = append(out, name)
		}
	}
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it deletes the holder's node, if it is still
// the node of the holder the operator saw; the next node in line then holds the lock. The
// holder learns of it at its next renewal.
func (b *Backend) ForceRelease(ctx context.Context, name string) (driver.Info, error) {
	info, err := b.Inspect(ctx, name)
	if err != nil || !info.Held {
		return info, err
	}
	q, err := b.queue(ctx, b.Path(name))
	if err != nil || len(q) == 0 {
		return driver.Info{Name: name}, err
	}
	path := b.Path(name) + "/" + q[0].name
	data, stat, err := b.read(ctx, path)
	switch {
	case err == errVanished:
		return driver.Info{Name: name}, nil
	case err != nil:
		return info, err
	case data.owner != info.Owner || stat.Czxid != info.Token:
		return driver.Info{Name: name}, nil // changed hands meanwhile
	}
	switch err := b.delete(ctx, path, stat.Version); {
	case err == zk.ErrNoNode || err == zk.ErrBadVersion:
		return driver.Info{Name: name}, nil
	case err != nil:
		return info, fmt.Errorf("force release of %q: %w", name, classify(err))
	}
	return info, nil
}
