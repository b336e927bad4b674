package etcdbackend

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
)

// owed is a deletion this Backend could not confirm: a release whose outcome is unknown (a
// timeout, a cut connection, an election), or a waiter's key it could not take out of line.
// Its key sits on a lease the Backend keeps alive, so left alone it would hold the lock, or a
// place at the head of the line, for no one until the Backend closed. Every keep-alive of a
// lease retries what is owed until it is done.
type owed struct {
	release bool
	lease   fencelock.Lease // a release: of hold, by lease.Owner
	hold    string
	key     string // a waiter's key, and the create revision it had
	metaKey string
	rev     int64
}

func (b *Backend) owe(o owed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.owed = append(b.owed, o)
}

// settleSoon retries what is owed on a goroutine of its own, one at a time, so that the
// keep-alive that calls it is never held up.
func (b *Backend) settleSoon(ctx context.Context) {
	b.mu.Lock()
	if len(b.owed) == 0 || b.settling || b.closed {
		b.mu.Unlock()
		return
	}
	b.settling = true
	b.settlers.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.settlers.Done()
		b.settle(ctx)
		b.mu.Lock()
		b.settling = false
		b.mu.Unlock()
	}()
}

// settle retries what is owed and keeps what still fails for the next call.
func (b *Backend) settle(ctx context.Context) {
	b.mu.Lock()
	todo := b.owed
	b.owed = nil
	b.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	var keep []owed
	for _, o := range todo {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var err error
		if o.release {
			_, err = b.release(octx, o.lease, o.hold)
			if errors.Is(err, fencelock.ErrNotHeld) || errors.Is(err, fencelock.ErrInvalid) {
				err = nil // gone already: its lease ended, or an earlier attempt did it
			}
		} else {
			err = b.deleteWaiter(octx, o.key, o.metaKey, o.rev)
		}
		cancel()
		if err != nil {
			keep = append(keep, o)
		}
	}
	if len(keep) > 0 {
		b.mu.Lock()
		b.owed = append(b.owed, keep...)
		b.mu.Unlock()
	}
}

// deleteWaiter deletes a waiter's key and metadata if the key is still the one made at rev.
func (b *Backend) deleteWaiter(ctx context.Context, key, metaKey string, rev int64) error {
	_, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key), clientv3.OpDelete(metaKey)).
		Commit()
	return err
}
