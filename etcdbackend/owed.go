package etcdbackend

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/settle"
)

// settleTimeout bounds one attempt of the settler. It runs in the background, under a
// context that Close ends, and Close waits for it.
const settleTimeout = 2 * time.Second

// settleRetry is how long the settler waits after a failed try, unless a keep-alive, or new
// work owed, asks sooner.
const settleRetry = time.Second

// owed is a release of one hold that this Backend could not confirm: a release whose outcome
// is unknown (a timeout, a cut connection, an election), or a waiter's leaving the line, which
// failed or came after the caller's deadline. Its key sits on a lease the Backend keeps alive,
// so left alone it would hold the lock, or a place in line, for no one until the Backend
// closed. The settler (internal/settle) retries what is owed at every keep-alive, and every
// second when none runs, until it is done.
//
// An acquisition of the same hold — the retry of one whose outcome was lost; no other
// acquisition has its hold ID — takes what is owed of that hold out of the settler's hands
// while it runs (claim), and, once granted, the hold is its holder's again and what was owed
// is void. So owed work never touches a key that a later grant adopted. Holds of other
// acquisitions in the same key are left alone: a release takes out its own hold only.
//
// A release owed after a write whose outcome is unknown vetoes that write first (see flight),
// so that a write etcd has yet to apply makes nothing after the release looked. The veto is
// owed still when a retry of the hold adopts the key: the write it vetoes is not the retry's.
type owed struct {
	lease   driver.Lease // the lock and the owner whose key holds hold
	hold    string
	rev     int64   // the create revision of that key, when known; 0: whichever key the owner has
	veto    attempt // the write to veto first, if its veto key is set
	retried bool    // a retry of the hold was granted: veto the write, and release nothing
}

func (o owed) of(req driver.Request) bool { return o.sameHold(leaseOf(req), req.Hold) }

// sameHold says whether o is of hold of the lock, or the permit, and the owner of l.
func (o owed) sameHold(l driver.Lease, hold string) bool {
	return o.lease.Name == l.Name && o.lease.Owner == l.Owner && o.hold == hold && (o.lease.Limit > 0) == (l.Limit > 0)
}

// newLedger returns the ledger of what b owes, which pays it with b.pay.
func (b *Backend) newLedger() *settle.Ledger[owed] {
	return settle.New(settle.Config[owed]{Pay: b.pay, Backoff: []time.Duration{settleRetry}})
}

// claim takes the releases owed of req's hold away from the settler, for an acquisition of
// that hold, once none of them is being made and no write of that hold is in flight (it may
// leave one owed). The caller gives them back with unclaim.
func (b *Backend) claim(ctx context.Context, req driver.Request) ([]owed, error) {
	taken, err := b.owed.Claim(ctx, func(o owed) bool { return o.of(req) },
		func() <-chan struct{} { return b.inFlight(leaseOf(req), req.Hold) })
	return taken, classify(err)
}

// unclaim gives back what claim took. Once the acquisition of the hold was granted, the
// releases owed of it are void, and what is given back is only the vetoes of its earlier
// writes.
func (b *Backend) unclaim(taken []owed, granted bool) {
	if !granted {
		b.owed.Unclaim(taken, nil)
		return
	}
	for i := range taken {
		taken[i].retried = true
	}
	b.owed.Unclaim(taken, func(o owed) bool { return o.veto.veto == "" })
}

// pay makes the release owed in o, after vetoing the write it follows, and reports whether
// it is done. A hold not there is released: its lease ended, or an earlier try did it.
func (b *Backend) pay(ctx context.Context, o *owed) (bool, <-chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if o.veto.veto != "" {
		if err := b.veto(ctx, o.veto); err != nil {
			return false, nil
		}
		o.veto = attempt{}
	}
	if o.retried {
		return true, nil
	}
	_, err := b.release(ctx, o.lease, o.hold, o.rev)
	return err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrInvalid), nil
}
