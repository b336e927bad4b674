package etcdbackend

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// An acquisition's write — the transaction that makes the owner's key, or adds a hold to it —
// may be applied after its caller stopped waiting for it: etcd applies a request whose
// context ended as it applies any other, and of two requests in flight at once it may apply
// the later one first. A clean-up that runs while the write is in flight finds nothing, and
// the key the write makes then sits on a lease this Backend keeps alive, held by no one. So
// every write is seen to its outcome:
//
//   - It runs under a context of its own. When the caller's context ends first, the caller
//     returns at once, and the reply is awaited in the background for up to settleTimeout
//     more: a key the write made, or a hold it added, is then owed its release; a write etcd
//     refused leaves nothing. Meanwhile a Release of that hold, or a retry of it, waits for
//     the outcome (see flight).
//   - A write whose outcome stays unknown (its reply lost, or not in time) is vetoed before its
//     release is tried. Each write requires that a veto key of its own be absent; the
//     clean-up puts that key on the lease the write's key would live on, so that the write
//     makes nothing if it is applied after, and the release finds what it made if it was
//     applied before. The veto key goes with that lease, as long as the write could still
//     be applied: a key of a few bytes per write whose outcome stayed unknown, which a
//     Backend's Close, or the lease's expiry, deletes.

// attempt is one acquisition's write: its veto key, and the lease that key goes on.
type attempt struct {
	veto  string
	lease clientv3.LeaseID
	rev   int64 // the create revision of the key it writes, when that key exists already
}

func (b *Backend) newAttempt(lease clientv3.LeaseID) attempt {
	seq := strconv.FormatUint(b.attempts.Add(1), 36)
	return attempt{veto: b.prefix + "!veto/" + b.id + "." + seq, lease: lease}
}

// unvetoed is the comparison the attempt's write makes: no clean-up vetoed it.
func (a attempt) unvetoed() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(a.veto), "=", 0)
}

// flight is a write whose caller left before its outcome was known.
type flight struct {
	of     owed          // the lock, owner and hold it writes
	landed chan struct{} // closed when its outcome is known, and what it left owed
}

// commit runs txn, req's write of attempt a, and returns its reply. A write that fails with
// its outcome unknown is owed its veto and its release. When ctx ends before the reply, it
// returns ctx's error at once and awaits the reply in the background: made says which key a
// write that etcd applied changed (its create revision; 0 when it changed nothing), and that
// key is owed the release of req's hold.
func (b *Backend) commit(ctx context.Context, req driver.Request, a attempt,
	txn func(context.Context) (*clientv3.TxnResponse, error), made func(*clientv3.TxnResponse) int64) (*clientv3.TxnResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // never sent
	}
	if ctx.Done() == nil {
		resp, err := txn(ctx) // the caller waits for the outcome, whatever it takes
		b.outcome(req, a, resp, err, nil)
		return resp, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(b.ctx, cancel) // Close ends it
	type reply struct {
		resp *clientv3.TxnResponse
		err  error
	}
	replied := make(chan reply, 1)
	go func() {
		resp, err := txn(wctx)
		replied <- reply{resp, err}
	}()
	select {
	case r := <-replied:
		stop()
		cancel()
		b.outcome(req, a, r.resp, r.err, nil)
		return r.resp, r.err
	case <-ctx.Done():
	}
	f, ok := b.fly(req)
	if !ok {
		// Closed: its leases are revoked, and whatever the write made with them.
		cancel()
		<-replied
		stop()
		return nil, ctx.Err()
	}
	go func() {
		defer b.settlers.Done()
		late := time.AfterFunc(settleTimeout, cancel)
		r := <-replied
		late.Stop()
		stop()
		cancel()
		b.outcome(req, a, r.resp, r.err, made)
		b.land(f)
	}()
	return nil, ctx.Err()
}

// outcome owes what req's write of attempt a left behind: nothing when etcd answered, but for
// what made says the write changed, when it is given (the caller left); its veto and its
// release when the outcome is unknown.
func (b *Backend) outcome(req driver.Request, a attempt, resp *clientv3.TxnResponse, err error, made func(*clientv3.TxnResponse) int64) {
	switch {
	case err == nil:
		if made != nil {
			if rev := made(resp); rev != 0 {
				b.unsure(req, rev)
			}
		}
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// Refused: a write on a lease that is gone makes nothing.
	default:
		b.owed.Owe(owed{lease: leaseOf(req), hold: req.Hold, rev: a.rev, veto: a}, nil)
	}
}

// fly notes a write of req whose caller left, for the background goroutine that awaits it:
// false once the Backend closed.
func (b *Backend) fly(req driver.Request) (*flight, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	f := &flight{of: owed{lease: leaseOf(req), hold: req.Hold}, landed: make(chan struct{})}
	b.flying = append(b.flying, f)
	b.settlers.Add(1)
	return f, true
}

func (b *Backend) land(f *flight) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, g := range b.flying {
		if g == f {
			b.flying = append(b.flying[:i], b.flying[i+1:]...)
			break
		}
	}
	close(f.landed)
}

// inFlight returns a channel closed when the write of the hold of lease that is in flight, if
// any, has landed; nil when there is none.
func (b *Backend) inFlight(lease driver.Lease, hold string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.flying {
		if f.of.sameHold(lease, hold) {
			return f.landed
		}
	}
	return nil
}

// veto puts a's veto key, so that its write, if etcd has not applied it yet, never will. A
// lease that is gone did that already: the write makes its key on it, or adds a hold to a key
// that went with it.
func (b *Backend) veto(ctx context.Context, a attempt) error {
	_, err := b.c.Put(ctx, a.veto, "", clientv3.WithLease(a.lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}
