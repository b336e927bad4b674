package zkbackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock"
)

// Inspect implements fencelock.Backend. The holder is the first node in line; Remaining is
// zero, since a lock lasts as long as its holder's session, which no one but the server knows.
func (b *Backend) Inspect(ctx context.Context, name string) (fencelock.Info, error) {
	if err := b.usable(ctx, name); err != nil {
		return fencelock.Info{}, err
	}
	info := fencelock.Info{Name: name}
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
	return info, fmt.Errorf("%w: %q changed hands %d times while being inspected", fencelock.ErrUnavailable, name, lookTries)
}
