// Package settle keeps what a backend owes its store after a reply it lost, and pays it in the
// background. A release whose outcome is unknown, a waiter's leaving the line that failed, a
// create whose reply was lost: each may leave a key or a lock node that holds the lock, or a
// place in line, for no one, as long as the backend keeps its lease or session alive.
//
// The etcd and ZooKeeper backends use it, each with items of its own: etcdbackend owes the
// release of a hold from a key (after the veto of the write that may have made it),
// zkbackend the removal of a hold from a lock node. Each tells the Ledger how to pay one item,
// which items are one, and when an item went by itself (Config); the Ledger does the rest:
//
//   - Owe records an item, with the write that left it owed when that is still pending.
//   - The settler, one goroutine that runs only while something is owed, pays one item at a
//     time, in the order owed; a payment that fails goes to the back, and the settler waits
//     Config.Backoff before the next. It waits on channels, not a clock: Owe, Unclaim and Kick
//     wake it, and so does the landing of a pending write.
//   - Claim takes the items of one hold out of the settler's hands for an acquisition of that
//     hold (the retry of one whose outcome was lost may take back what it left), once none of
//     them is being paid or waits for its write; Unclaim gives them back, but for what the
//     grant made void. So owed work never touches what a later grant adopted.
//   - Settled tells when nothing is owed; Close stops the settler, and Done when it has ended.
//
// Locking: Ledger.mu guards the items owed, the one being paid, and the state of the settler
// and of the goroutines that wait for pending writes; nobody holds it across a payment.
// Config.Gone and Config.Blocked run under it, on the settler's goroutine.
package settle

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Config is what a backend tells its Ledger of its items, of type T.
type Config[T any] struct {
	// Pay makes the payment of *it and reports whether nothing is owed of it any more. When
	// something is, Pay may change *it for the next attempt and return the write it left in
	// flight, which that attempt waits for. ctx ends on Close. Required.
	Pay func(ctx context.Context, it *T) (done bool, pending <-chan struct{})
	// Backoff is how long the settler waits after a failed payment: Backoff[n-1] after the
	// n-th failure in a row, the last one after any more. Whatever wakes the settler cuts it
	// short. Required.
	Backoff []time.Duration
	// Same, when set, reports whether a and b are one debt: Owe does not record it twice.
	Same func(a, b T) bool
	// Gone, when set, reports whether it needs no payment any more: what it would remove went
	// by itself. The settler drops it. It runs under the Ledger's lock: it must not call the
	// Ledger.
	Gone func(it T) bool
	// Blocked, when set, reports that the settler cannot pay now (the store is out of reach),
	// and how long it waits before it asks again, unless woken sooner; 0 when it can. It runs
	// under the Ledger's lock, while something is owed.
	Blocked func() time.Duration
}

// Ledger is what a backend owes its store, and the settler that pays it. It is safe for
// concurrent use.
type Ledger[T any] struct {
	cfg    Config[T]
	ctx    context.Context // ends on Close; the payments run under it
	cancel context.CancelFunc
	wake   chan struct{} // (one buffered) has the settler look again at once
	done   chan struct{} // closed once Close was called and no goroutine of the Ledger's runs

	mu       sync.Mutex    // guards the fields below
	owed     []*entry[T]   // in the order owed, a failed payment at the back
	paying   *entry[T]     // the item the settler is paying, or nil
	paid     chan struct{} // closed when that payment ends
	settled  chan struct{} // closed once nothing is owed or being paid; nil until asked for
	settling bool          // the settler runs
	watchers int           // goroutines waiting for a pending write to land
	closed   bool
}

// entry is one item owed.
type entry[T any] struct {
	it      T
	pending <-chan struct{} // closed once the write that left it owed has its answer; nil: none
}

// waiting reports whether e waits for its write.
func (e *entry[T]) waiting() bool {
	if e.pending == nil {
		return false
	}
	select {
	case <-e.pending:
		return false
	default:
		return true
	}
}

// New returns an empty Ledger. It panics when cfg lacks Pay or Backoff.
func New[T any](cfg Config[T]) *Ledger[T] {
	if cfg.Pay == nil || len(cfg.Backoff) == 0 {
		panic("settle: a Config needs Pay and Backoff")
	}
	l := &Ledger[T]{cfg: cfg, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// Owe records it, and has the settler pay it. pending, when not nil, is closed once the write
// that left it owed has its answer: it is paid only then. With Config.Same, an item the same
// as one owed already is not recorded again: that one waits for pending too, unless both wait
// for writes of their own. After Close, Owe records it for Len alone.
func (l *Ledger[T]) Owe(it T, pending <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := -1
	if l.cfg.Same != nil {
		i = slices.IndexFunc(l.owed, func(e *entry[T]) bool {
			return l.cfg.Same(e.it, it) && (pending == nil || e.pending == pending || !e.waiting())
		})
	}
	switch {
	case i < 0:
		e := &entry[T]{it: it}
		l.await(e, pending)
		l.owed = append(l.owed, e)
	case pending != nil:
		l.await(l.owed[i], pending)
	}
	l.settle()
}

// Kick has the settler try what is owed at once, its backoff cut short: the store was heard
// from.
func (l *Ledger[T]) Kick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle()
}

// Claim takes the items of one hold, those of reports true of, out of the settler's hands
// for an acquisition of that hold, and returns them. It waits first until none of them is
// being paid or waits for its write, and, when flying is given, until it returns nil: flying
// returns a channel closed once a write of that hold the Ledger does not know of (it may leave
// something owed when it lands) has landed. When ctx ends first it returns ctx's error, and
// has taken nothing. The caller gives the items back with Unclaim.
func (l *Ledger[T]) Claim(ctx context.Context, of func(T) bool, flying func() <-chan struct{}) ([]T, error) {
	for {
		var busy <-chan struct{}
		if flying != nil {
			busy = flying()
		}
		if busy == nil {
			var taken []T
			if taken, busy = l.take(of); busy == nil {
				return taken, nil
			}
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// take takes the items of reports true of, unless one of them is being paid or waits for its
// write: it returns then a channel closed when that ends.
func (l *Ledger[T]) take(of func(T) bool) ([]T, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paying != nil && of(l.paying.it) {
		return nil, l.paid
	}
	for _, e := range l.owed {
		if of(e.it) && e.waiting() {
			return nil, e.pending
		}
	}
	var taken []T
	l.owed = slices.DeleteFunc(l.owed, func(e *entry[T]) bool {
		if of(e.it) {
			taken = append(taken, e.it)
			return true
		}
		return false
	})
	l.emptied()
	return taken, nil
}

// Unclaim gives back what Claim took, once the acquisition ended, but for the items void
// reports true of (none when void is nil): what its grant made void.
func (l *Ledger[T]) Unclaim(taken []T, void func(T) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	given := false
	for _, it := range taken {
		if void == nil || !void(it) {
			l.owed = append(l.owed, &entry[T]{it: it})
			given = true
		}
	}
	if given {
		l.settle()
	}
}

// Len is how many items are owed, the one being paid included, and those Claim took not.
func (l *Ledger[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.owed)
	if l.paying != nil {
		n++
	}
	return n
}

// closedChan is a channel closed already.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Settled returns a channel closed once nothing is owed or being paid: at once when that is
// so now. Items Claim took do not count.
func (l *Ledger[T]) Settled() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.owed) == 0 && l.paying == nil {
		return closedChan
	}
	if l.settled == nil {
		l.settled = make(chan struct{})
	}
	return l.settled
}

// Close stops the settler: none starts any more, and the payment in progress has its context
// cancelled. What is owed stays owed, for Len. Done is closed once the settler has ended.
func (l *Ledger[T]) Close() {
	l.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.ended()
}

// Done returns a channel closed once Close was called and no goroutine of the Ledger's runs.
func (l *Ledger[T]) Done() <-chan struct{} { return l.done }

// settle starts the settler, or wakes it. l.mu is held.
func (l *Ledger[T]) settle() {
	switch {
	case l.settling:
		l.poke()
	case len(l.owed) > 0 && !l.closed:
		l.settling = true
		go l.run()
	}
}

func (l *Ledger[T]) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// await has e wait for pending, and the settler woken when it lands. l.mu is held.
func (l *Ledger[T]) await(e *entry[T], pending <-chan struct{}) {
	e.pending = pending
	if pending == nil || l.closed {
		return
	}
	l.watchers++
	go func() {
		select {
		case <-pending:
			l.poke()
		case <-l.ctx.Done():
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.watchers--
		l.ended()
	}()
}

// emptied tells Settled's callers when nothing is owed or being paid. l.mu is held.
func (l *Ledger[T]) emptied() {
	if len(l.owed) == 0 && l.paying == nil && l.settled != nil {
		close(l.settled)
		l.settled = nil
	}
}

// ended closes done once the Ledger is closed and none of its goroutines runs. l.mu is held.
func (l *Ledger[T]) ended() {
	if !l.closed || l.settling || l.watchers > 0 {
		return
	}
	select {
	case <-l.done:
	default:
		close(l.done)
	}
}
