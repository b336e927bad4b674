package fencelock

import (
	"context"
	"slices"
)

// List returns the locks of b held now whose names start with prefix, sorted by name. It sees
// each lock as Inspect saw it, one after the other, not all at one instant. A backend that is
// not a Namer cannot list its locks: the error matches ErrInvalid.
func List(ctx context.Context, b Backend, prefix string) ([]Info, error) {
	n, ok := b.(Namer)
	if !ok {
		return nil, invalidf("this backend cannot list its locks (it does not implement fencelock.Namer)")
	}
	names, err := n.Names(ctx, prefix)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []Info
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		info, err := b.Inspect(ctx, name)
		if err != nil {
			return out, err
		}
		if info.Held {
			out = append(out, info)
		}
	}
	return out, nil
}

// List returns the locks held now whose names start with prefix, as the package's List does
// for the Client's backend.
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	return List(ctx, c.b, prefix)
}
