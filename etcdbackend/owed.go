package etcdbackend

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// settleTimeout bounds one attempt of the settler. It runs in the background, under the
// Backend's context, and Close waits for it.
const settleTimeout = 2 * time.Second

// settleRetry is how often what is owed is tried again when no keep-alive asks sooner.
const settleRetry = time.Second

// owed is a release of one hold that this Backend could not confirm: a release whose outcome
// is unknown (a timeout, a cut connection, an election), or a waiter's leaving the line, which
// failed or came after the caller's deadline. Its key sits on a lease the Backend keeps alive,
// so left alone it would hold the lock, or a place in line, for no one until the Backend
// closed. The settler retries what is owed at every keep-alive, and every second when none
// runs, until it is done.
//
// An acquisition of the same hold — the retry of one whose outcome was lost; no other
// acquisition has its hold ID — takes what is owed of that hold out of the settler's hands
// while it runs (suspend), and, once granted, the hold is its holder's again and what was owed
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

func (b *Backend) owe(o owed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.owed = append(b.owed, o)
}

// suspend takes the releases owed of req's hold away from the settler, waiting for one it is
// making now, and for a write of that hold still in flight, for an acquisition of that hold.
// The caller gives them back with resume unless the acquisition is granted, and then with
// adopted.
func (b *Backend) suspend(ctx context.Context, req driver.Request) ([]owed, error) {
	var taken []owed
	for {
		if landed := b.inFlight(leaseOf(req), req.Hold); landed != nil {
			select {
			case <-landed:
			case <-ctx.Done():
				b.resume(taken)
				return nil, classify(ctx.Err())
			}
		}
		b.mu.Lock()
		kept := b.owed[:0]
		for _, o := range b.owed {
			if o.of(req) {
				taken = append(taken, o)
			} else {
				kept = append(kept, o)
			}
		}
		b.owed = kept
		var busy <-chan struct{}
		if b.settlingNow != nil && b.settlingNow.of(req) {
			busy = b.settled
		}
		b.mu.Unlock()
		if busy == nil {
			return taken, nil
		}
		select {
		case <-busy: // done, or owed again: look again
		case <-ctx.Done():
			b.resume(taken)
			return nil, classify(ctx.Err())
		}
	}
}

// adopted gives back, once the acquisition of a hold was granted, what was owed of it but
// its release: the vetoes of its earlier writes.
func (b *Backend) adopted(taken []owed) {
	var vetoes []owed
	for _, o := range taken {
		if o.veto.veto != "" {
			o.retried = true
			vetoes = append(vetoes, o)
		}
	}
	b.resume(vetoes)
}

func (b *Backend) resume(taken []owed) {
	if len(taken) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.owed = append(b.owed, taken...)
}

// settleSoon retries what is owed on a goroutine of its own, so that the keep-alive or the
// call that asks for it is never held up; when that goroutine runs already, it tries again at
// once after the pass it is making.
func (b *Backend) settleSoon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.owed) == 0 || b.closed {
		return
	}
	if b.settling {
		select {
		case b.nudged <- struct{}{}:
		default:
		}
		return
	}
	b.settling = true
	b.settlers.Add(1)
	go b.settleAll()
}

// settleAll settles what is owed until nothing is, or the Backend closes: a pass when asked
// (at each keep-alive, and when something new is owed), and one every settleRetry besides, for
// a Backend whose leases all ended has no keep-alive to ask.
func (b *Backend) settleAll() {
	defer b.settlers.Done()
	t := time.NewTimer(settleRetry)
	defer t.Stop()
	for {
		b.settle(b.ctx)
		b.mu.Lock()
		if len(b.owed) == 0 || b.closed {
			b.settling = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		t.Reset(settleRetry)
		select {
		case <-b.nudged:
		case <-t.C:
		case <-b.ctx.Done():
			b.mu.Lock()
			b.settling = false
			b.mu.Unlock()
			return
		}
	}
}

// settle tries each release owed once, one at a time, and keeps what still fails for the next
// pass.
func (b *Backend) settle(ctx context.Context) {
	b.mu.Lock()
	n := len(b.owed)
	b.mu.Unlock()
	for range n {
		o, ok := b.nextOwed()
		if !ok {
			return
		}
		octx, cancel := context.WithTimeout(ctx, settleTimeout)
		done := b.pay(octx, &o)
		cancel()
		b.mu.Lock()
		if !done {
			b.owed = append(b.owed, o)
		}
		b.settlingNow = nil
		close(b.settled)
		b.mu.Unlock()
	}
}

// nextOwed takes the first release owed and marks it as the one being made.
func (b *Backend) nextOwed() (owed, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.owed) == 0 {
		return owed{}, false
	}
	o := b.owed[0]
	b.owed = b.owed[1:]
	b.settlingNow, b.settled = &o, make(chan struct{})
	return o, true
}

// pay makes the release owed in o, after vetoing the write it follows, and reports whether
// it is done. A hold not there is released: its lease ended, or an earlier try did it.
func (b *Backend) pay(ctx context.Context, o *owed) bool {
	if o.veto.veto != "" {
		if err := b.veto(ctx, o.veto); err != nil {
			return false
		}
		o.veto = attempt{}
	}
	if o.retried {
		return true
	}
	_, err := b.release(ctx, o.lease, o.hold, o.rev)
	return err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrInvalid)
}
