package redisbackend

import (
	"context"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

var (
	_ driver.Namer          = (*Backend)(nil)
	_ driver.SemaphoreNamer = (*Backend)(nil)
	_ driver.ForceReleaser  = (*Backend)(nil)
)

// Names implements driver.Namer with SCAN over every master.
func (b *Backend) Names(ctx context.Context, prefix string) ([]string, error) {
	if err := b.open(); err != nil {
		return nil, err
	}
	return redislayer.Names(ctx, b.c, b.prefix, prefix)
}

// SemaphoreNames implements driver.SemaphoreNamer with SCAN over every master: the
// semaphores whose permits key (<prefix>{N}:s) or line (:s:q) exists. The line counts as well:
// when the last permit expires its keys go with it, and the first waiter takes the permit only
// at its next attempt, a moment later.
func (b *Backend) SemaphoreNames(ctx context.Context, prefix string) ([]string, error) {
	if err := b.open(); err != nil {
		return nil, err
	}
	return redislayer.NamesOf(ctx, b.c, b.prefix, prefix, semSuffixes[0], semSuffixes[3])
}

// ForceRelease implements driver.ForceReleaser: it ends the lock whoever holds it and hands
// it to the first waiter in line, or wakes the waiters of ReleaseWatcher. The fence counter stays, so the next token is still greater.
func (b *Backend) ForceRelease(ctx context.Context, name string) (driver.Info, error) {
	info, err := b.Inspect(ctx, name)
	if err != nil || !info.Held {
		return info, err
	}
	n, err := redisconn.Int64(b.c.Eval(ctx, forceScript, b.queueKeys(name), info.Owner, b.announce, b.retentionArg, b.form))
	if err != nil {
		return info, redislayer.Classify(err)
	}
	if n == 0 {
		return driver.Info{Name: name}, nil // released or changed hands meanwhile
	}
	return info, nil
}
