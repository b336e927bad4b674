package redisbackend

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// Release implements driver.Backend.
func (b *Backend) Release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if err := b.usable(lease.Name); err != nil {
		return 0, err
	}
	return b.release(ctx, lease, hold)
}

// release is Release for a usable name, also while the Backend closes.
func (b *Backend) release(ctx context.Context, lease driver.Lease, hold string) (int, error) {
	if lease.Limit > 0 {
		return b.releasePermit(ctx, lease, hold)
	}
	args := []any{holdValue(lease.Token, hold, lease.Owner)}
	if strings.ContainsAny(hold, luaSpace) { // the one case release.lua cannot read it from the first
		args = append(args, hold)
	}
	n, err := redisconn.Int64(b.pipe.run(ctx, b.cycle.release, b.queueKeys(lease.Name), args...))
	switch {
	case err != nil:
		return 0, redislayer.Classify(err)
	case n < 0:
		return 0, fmt.Errorf("%w: %q is not held by this owner in Redis", driver.ErrNotHeld, lease.Name)
	}
	return int(n), nil
}

// holdValue is a hold as release.lua reads it: '<token> <hold> <owner>', the lock's plain form
// (lock.lua) while the hold is its only one, so that a release of such a lock compares one
// string; token 0 stands for whatever lock the owner holds.
func holdValue(token int64, hold, owner string) string {
	var num [20]byte
	var sb strings.Builder
	sb.Grow(len(num) + len(hold) + len(owner) + 2)
	sb.Write(strconv.AppendInt(num[:0], token, 10))
	sb.WriteByte(' ')
	sb.WriteString(hold)
	sb.WriteByte(' ')
	sb.WriteString(owner)
	return sb.String()
}

// luaSpace is what Lua's %s matches: the white space that the plain form's hold ID has none of.
const luaSpace = " \t\n\v\f\r"

// trimmed is a script's arguments without the empty strings at their end: the scripts that
// take optional arguments last read a missing one as empty, and each argument sent costs the
// server a string.
func trimmed(args ...any) []any {
	for len(args) > 0 && args[len(args)-1] == "" {
		args = args[:len(args)-1]
	}
	return args
}

var _ driver.Publisher = (*Backend)(nil)

// Publish implements driver.Publisher: one script replaces the lock's metadata, when the
// owner holds it under the lease's token, and announces the change on the lock's release
// channel (see WatchHolder).
func (b *Backend) Publish(ctx context.Context, lease driver.Lease, meta string) error {
	if err := b.usable(lease.Name); err != nil {
		return err
	}
	n, err := redisconn.Int64(b.pipe.run(ctx, publishScript, []string{b.Key(lease.Name)}, lease.Owner, lease.Token, meta, b.announce))
	switch {
	case err != nil:
		return redislayer.Classify(err)
	case n < 0:
		return fmt.Errorf("%w: %q is not held by this owner under token %d in Redis", driver.ErrNotHeld, lease.Name, lease.Token)
	}
	return nil
}
