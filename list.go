package fencelock

import (
	"context"
	"slices"

	"github.com/fencelock/fencelock/driver"
)

// List returns the locks of b held now whose names start with prefix, sorted by name. It sees
// each lock as Inspect saw it, one after the other, not all at one instant. A backend that is
// not a driver.Namer cannot list its locks: the error matches ErrInvalid.
func List(ctx context.Context, b Backend, prefix string) ([]Info, error) {
	n, ok := b.(driver.Namer)
	if !ok {
		return nil, invalidf("this backend cannot list its locks (it does not implement driver.Namer)")
	}
	names, err := n.Names(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return inspectEach(ctx, names, b.Inspect, func(i Info) bool { return i.Held })
}

// List returns the locks held now whose names start with prefix, as the package's List does
// for the Client's backend, with the Client's token base (WithTokenBase) added to the tokens.
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	infos, err := List(ctx, c.b, prefix)
	for i := range infos {
		infos[i] = c.based(infos[i])
	}
	return infos, err
}

// ListSemaphores returns the semaphores of b whose names start with prefix and that have
// permits held or waiters in line now, sorted by name; a read-write lock is among them, as the
// semaphore of RWReaders permits it is. It sees each semaphore as InspectSemaphore saw it, one
// after the other, not all at one instant. A backend that keeps no semaphores, or is not a
// driver.SemaphoreNamer, cannot list them: the error matches ErrInvalid.
func ListSemaphores(ctx context.Context, b Backend, prefix string) ([]SemaphoreInfo, error) {
	s, ok := b.(driver.Semaphores)
	if !ok {
		return nil, errNoSemaphores
	}
	n, ok := b.(driver.SemaphoreNamer)
	if !ok {
		return nil, invalidf("this backend cannot list its semaphores (it does not implement driver.SemaphoreNamer)")
	}
	names, err := n.SemaphoreNames(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return inspectEach(ctx, names, s.InspectSemaphore, func(i SemaphoreInfo) bool {
		return len(i.Permits) > 0 || i.Waiting > 0
	})
}

// ListSemaphores returns the semaphores with permits held or waiters now whose names start
// with prefix, as the package's ListSemaphores does for the Client's backend, with the Client's
// token base (WithTokenBase) added to the tokens.
func (c *Client) ListSemaphores(ctx context.Context, prefix string) ([]SemaphoreInfo, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	infos, err := ListSemaphores(ctx, c.b, prefix)
	for i := range infos {
		infos[i] = c.basedSemaphore(infos[i])
	}
	return infos, err
}

// inspectEach inspects each of names once, in order, and returns what keep keeps; on an error
// it returns what it kept before it.
func inspectEach[T any](ctx context.Context, names []string, inspect func(context.Context, string) (T, error), keep func(T) bool) ([]T, error) {
	slices.Sort(names)
	names = slices.Compact(names)
	var out []T
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		info, err := inspect(ctx, name)
		if err != nil {
			return out, err
		}
		if keep(info) {
			out = append(out, info)
		}
	}
	return out, nil
}
