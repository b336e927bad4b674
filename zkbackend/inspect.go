package zkbackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/driver"
)

// Inspect implements driver.Backend. The holder is the first node in line; Remaining is
// zero, since a lock lasts as long as its holder's session, which no one but the server knows.
func (b *Backend) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := b.usable(ctx, name); err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Name: name}
	for range lookTries {
		q, err := b.queue(ctx, b.Path(name))
		if err != nil || len(q) == 0 {
			return info, err
		}
		data, stat, err := b.read(ctx, b.Path(name)+"/"+q[0].name)
		if err == errVanished {
			continue // released meanwhile: look again
		}
		if err != nil {
			return info, err
		}
		info.Held, info.Owner, info.Count, info.Token, info.Meta = true, data.owner, data.count(), stat.Czxid, data.meta
		return info, nil
	}
	return info, fmt.Errorf("%w: %q changed hands %d times while being inspected", driver.ErrUnavailable, name, lookTries)
}

var _ driver.LineLister = (*Backend)(nil)

// Line implements driver.LineLister: the lock nodes after the first, in the order of their
// sequence numbers, each read for its owner and metadata; a node gone meanwhile is left out.
// An owner with more than one node (waiters of one owner) is listed once.
func (b *Backend) Line(ctx context.Context, name string) ([]driver.Info, error) {
	if err := b.usable(ctx, name); err != nil {
		return nil, err
	}
	q, err := b.queue(ctx, b.Path(name))
	if err != nil || len(q) < 2 {
		return nil, err
	}
	head, _, err := b.read(ctx, b.Path(name)+"/"+q[0].name)
	if err != nil && err != errVanished {
		return nil, err
	}
	seen := map[string]bool{head.owner: err == nil}
	var out []driver.Info
	for _, e := range q[1:] {
		data, _, err := b.read(ctx, b.Path(name)+"/"+e.name)
		switch {
		case err == errVanished:
			continue
		case err != nil:
			return out, err
		case seen[data.owner]:
			continue
		}
		seen[data.owner] = true
		out = append(out, driver.Info{Name: name, Owner: data.owner, Meta: data.meta})
	}
	return out, nil
}
