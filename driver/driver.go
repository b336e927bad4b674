package driver

import (
	"context"
	"time"
)

// Backend is what a store must provide to hold fencelock locks. The Client does everything
// else: validation, waiting, the watchdog, validity deadlines, reentrancy by owner, cleanup of
// ambiguous outcomes and observation. Implementations must be safe for concurrent use.
//
// A backend keeps, per lock name: the owner, a hold count, and a fencing token that is strictly
// greater than every token issued before for that name. Each hold carries an ID so that a
// retried Release of the same hold never decrements twice.
type Backend interface {
	// Acquire makes one attempt to take the lock for req.Owner, or to enter it once more when
	// req.Owner holds it already. It returns a *HeldError when another owner holds it.
	Acquire(ctx context.Context, req Request) (Grant, error)

	// Renew extends the given leases, as one batch where the store allows it, or confirms that
	// the store still keeps them where a background keep-alive extends them. It returns one
	// Renewal per lease, in order; see Renewal.
	Renew(ctx context.Context, leases []Lease) []Renewal

	// Release ends one hold. It returns the hold count left (0 when the lock is free), an error
	// matching ErrNotHeld when the owner does not hold the lock, and is a no-op that returns
	// the current count when this hold was released already.
	Release(ctx context.Context, lease Lease, hold string) (int, error)

	// Inspect reports the state of a lock without changing it.
	Inspect(ctx context.Context, name string) (Info, error)
}

// ReleaseWatcher is implemented by backends that can tell a waiter that a lock was released,
// so that Obtain wakes at once instead of polling.
type ReleaseWatcher interface {
	// WatchRelease returns a channel that receives a value each time the lock may have become
	// free. It returns only once the subscription is in place, so that a release after it
	// returns is never missed. stop ends the watch; it is safe to call more than once.
	WatchRelease(ctx context.Context, name string) (released <-chan struct{}, stop func(), err error)
}

// HolderWatcher is implemented by backends whose store pushes word of a change of a lock's
// holder, so that Election.Observe looks when told instead of polling while someone leads.
type HolderWatcher interface {
	// WatchHolder returns a channel that receives a value each time the holder of the lock
	// name, or what it published, may have changed: a release, a hand-over to the next in
	// line, a metadata update (Publisher), and wherever the store can push them, an expiry
	// and an acquisition of a free lock. It returns only once the watch is in place, and
	// sends a value after a lapse of the watch (a reconnection) in which a change may have
	// passed unseen. stop ends the watch; it is safe to call more than once.
	WatchHolder(ctx context.Context, name string) (changed <-chan struct{}, stop func(), err error)
	// PushesAcquisitions says the watch also tells of the expiry of a holder's lock and of
	// the acquisition of a free lock; Observe polls for those where it does not.
	PushesAcquisitions() bool
}

// Publisher is implemented by backends that can change what a holder published about itself
// (Request.Meta) while it holds the lock, without a new grant: Leadership.Proclaim uses it.
type Publisher interface {
	// Publish replaces the metadata of the lock of lease with meta (none when meta is empty),
	// when lease.Owner holds it under lease.Token; the token and the TTL stay as they are, and
	// the holder's watchers are told (HolderWatcher). It returns an error matching ErrNotHeld
	// when the owner does not hold that lock. The Client publishes for locks alone
	// (Leadership.Proclaim): lease.Limit is 0.
	Publish(ctx context.Context, lease Lease, meta string) error
}

// Queue is implemented by backends that keep waiters in a fair, first-come first-served queue
// (Redis, etcd, ZooKeeper). Obtain then waits inside AcquireQueued instead of retrying Acquire.
type Queue interface {
	// AcquireQueued takes the lock like Acquire, but when another owner holds it, joins the
	// queue of waiters and returns once req holds the lock. When ctx ends first, it leaves the
	// queue and returns an error matching ctx.Err().
	AcquireQueued(ctx context.Context, req Request) (Grant, error)
}

// LineLister is implemented by a Queue that can list its line: Election.Candidates uses it.
type LineLister interface {
	// Line returns the waiters in the line of the lock name, first in line first, each as an
	// Info with Name, Owner and Meta (what the waiter's request published); one waiter per
	// owner, and never the holder. A waiter whose place lapsed may be left out.
	Line(ctx context.Context, name string) ([]Info, error)
}

// OwnerReuser is implemented by backends whose store keeps a trace of every key it deleted
// until the store is compacted, and walks those traces wherever it looks at a lock's line: etcd
// keeps a key per owner in a lock's queue, and each acquisition reads the queue. A name taken
// and released with a fresh owner each time would leave a trace per acquisition and make each
// acquisition slower than the last. For such a backend the Client gives the owner ID of a lock
// it released cleanly (one hold, never lost, released at the first try) to its next
// acquisition of the same name with a fresh owner. The backend's Release must then refuse a
// Lease whose Token is not that of the owner's current lock, so that a late release of the
// earlier lock cannot end the later one.
type OwnerReuser interface {
	// ReusesOwners reports whether the Client may reuse owner IDs as above.
	ReusesOwners() bool
}

// LossWatcher is implemented by backends whose store can push word that a held lock changed
// (the Redis backend, through CLIENT TRACKING), so that its holder learns of a loss within
// milliseconds instead of at its next renewal. The watchdog asks for a watch once a hold it
// renews has lived a few milliseconds; renewals stay the fallback.
type LossWatcher interface {
	// WatchLoss watches the lock of lease until stop is called; stop is safe to call more
	// than once. When the store says the lock is no longer the lease's — its key was deleted
	// or overwritten, a server came back without it — the backend calls lost once, from a
	// goroutine of its own, with an error matching ErrNotHeld; after a dropped connection it
	// checks at once. WatchLoss returns at once, without a round trip.
	WatchLoss(lease Lease, lost func(reason error)) (stop func())
}

// Semaphores is implemented by backends that keep semaphores as well as locks. A Request or
// Lease with Limit > 0 then names a permit of the semaphore Name instead of the lock: Acquire
// takes one of its Limit permits for Owner (or enters Owner's permit once more), returning a
// *HeldError when all are held; Renew and Release act on Owner's permit alone; AcquireQueued,
// when the backend is also a Queue, waits first come, first served. A semaphore's tokens are
// strictly increasing per name, as a lock's are, and a semaphore's limit is the one its
// current holders agreed on: a request with another limit while permits are held fails with a
// *LimitError. A semaphore and a lock of the same name are unrelated.
type Semaphores interface {
	// InspectSemaphore reports the permits of the semaphore name without changing them.
	InspectSemaphore(ctx context.Context, name string) (SemaphoreInfo, error)
}

// SemaphoreInfo describes a semaphore as the backend sees it.
type SemaphoreInfo struct {
	Name string
	// Limit is the number of permits the holders agreed on; 0 when none is held.
	Limit int
	// InUse is how many permits the holders take (each holder takes Info.Weight).
	InUse int
	// Permits are the permits held, one Info each (Owner, Count, Token, Remaining, Meta), the
	// first to expire first.
	Permits []Info
	// Waiting is the number of waiters in line, when the backend keeps one.
	Waiting int
	// Token is the last token issued for the semaphore, if the backend still knows it.
	Token int64
}

// Namer is implemented by backends that can enumerate their locks; List uses it.
type Namer interface {
	// Names returns the names that start with prefix of the locks that may be held now, each
	// once, in no particular order. A name may be of a lock released meanwhile; List asks
	// Inspect about each.
	Names(ctx context.Context, prefix string) ([]string, error)
}

// SemaphoreNamer is implemented by backends that can enumerate their semaphores;
// ListSemaphores uses it.
type SemaphoreNamer interface {
	// SemaphoreNames returns the names that start with prefix of the semaphores that may have
	// permits held now, each once, in no particular order. A name may be of a semaphore
	// released meanwhile; ListSemaphores asks InspectSemaphore about each.
	SemaphoreNames(ctx context.Context, prefix string) ([]string, error)
}

// ForceReleaser is implemented by backends that let an operator remove a lock whoever holds
// it. The holder learns at its next renewal that it lost the lock.
type ForceReleaser interface {
	// ForceRelease removes the current hold of name and returns what it removed; Info.Held is
	// false when the lock was free.
	ForceRelease(ctx context.Context, name string) (Info, error)
}

// Request is one acquisition attempt.
type Request struct {
	Name string
	// Owner identifies the holder. Two requests with the same owner are the same holder: the
	// second one re-enters the lock.
	Owner string
	// Hold identifies this acquisition among the owner's holds. It is empty only for the
	// first acquisition of an owner no one else uses (the Client's own owner IDs), which makes
	// the owner's lock in the store: a backend may take a release of the empty hold with the
	// token of that lock to be the release of the lock as that acquisition made it.
	Hold string
	TTL  time.Duration
	// Meta is what the holder publishes about itself for operators (fencelock status), kept
	// with a first acquisition; empty when it publishes nothing.
	Meta string
	// Limit, when positive, makes the request one for a permit of the semaphore Name, of Limit
	// permits (see Semaphores); zero asks for the lock Name.
	Limit int
	// Weight is how many of the Limit permits the request takes, at least 1 (0 means 1). A
	// re-entry by the owner may ask for as many as its permit takes or fewer, never more: the
	// backend then fails with an error matching ErrUpgrade. The permit takes as many as the
	// largest of its holds asked for, so that releasing the largest gives the difference back.
	Weight int
	// Token, when positive, is the token of the owner's lock that the caller holds and trusts
	// valid as it sends the request: the request re-enters that lock. A backend that cannot
	// always confirm a lock's token on a re-entry (Redlock, when a node answers late) may take
	// it for the lock's instead of making a new one, as long as it knows that no greater token
	// was handed out; others ignore it.
	Token int64
	// Waiting, when set, is called by Queue.AcquireQueued, at most once and on the calling
	// goroutine, when the request begins to wait behind another holder (its first attempt
	// did not get the lock), and only then. The Client tells its observer (EventWaiting), and
	// takes the grant that follows for a hand-over on that holder's release or expiry.
	Waiting func()
}

// StartWait calls r.Waiting, if set: a Queue calls it when r begins to wait in line.
func (r Request) StartWait() {
	if r.Waiting != nil {
		r.Waiting()
	}
}

// Lease names a held lock for renewal and release.
type Lease struct {
	Name  string
	Owner string
	// TTL is the lock's TTL as its holder last set it (Obtain or Refresh).
	TTL time.Duration
	// Token is the token of the grant the lease belongs to. A backend that can should refuse
	// to renew a lock the owner holds under another token: that is a later lock of the same
	// owner, and a renewal sent for the earlier one must not change its TTL.
	Token int64
	// Refresh says the holder sets the TTL (Lock.Refresh): the store takes it even when it is
	// shorter than what the lock has left — unless the lock has more holds than Holds, the
	// holds the caller has of it: then another Client holds it under the same owner, and a
	// shorter TTL would cut that holder's lock short. A watchdog renewal only ever extends the
	// lock, for the same reason.
	Refresh bool
	Holds   int
	// Limit is the Request's: positive for a permit of the semaphore Name.
	Limit int
	// NoMeta says the request that made the hold published no metadata (WithMetadata): a
	// backend that keeps metadata apart from the lock need not delete any when this hold, if it
	// made the lock, releases it. The zero value promises nothing.
	NoMeta bool
}

// Grant is what a successful Acquire or AcquireQueued returns.
//
// # What a validity is measured from
//
// The Client trusts a grant until
//
//	start + Elapsed + v − drift(v),  v = Validity when 0 < Validity < TTL, else TTL,
//
// where start is its clock reading just before it called the backend and drift(v) is its
// allowance for clocks that run at different rates (1% of v plus 2 ms). A backend therefore
// says: "the store keeps this lock at least v after the moment start+Elapsed", and that moment
// must be one the store's grant is known to follow — the send of the request that made the
// grant, or of a later request that found it still in place. A backend never subtracts drift
// or its own round trips from Validity: counting from a send covers the round trip, and the
// Client alone subtracts drift. A grant the backend learns of late (a message, a watch event)
// is counted from a send it can show came before the grant, or confirmed by a new request and
// counted from that one.
type Grant struct {
	// Token is the fencing token of the lock. Reentrant acquisitions return the token of the
	// holder's first acquisition, so that the owner and the token name one lock in the store:
	// a grant with the owner's token is another hold of the lock the Client holds already, and
	// one with a greater token is a new lock — the earlier one was lost.
	Token int64
	// Count is the hold count after this acquisition.
	Count int
	// Validity, when positive and below the TTL, is how long after start+Elapsed the store
	// keeps the lock (see above): a queued grant handed over for a short claim, a lease whose
	// last keep-alive came before the request. A Queue may hand a waiter the lock for less
	// than its TTL, so that a waiter that died in line holds it only that long: the Client
	// extends it at its first renewal, at once when it runs no watchdog.
	Validity time.Duration
	// Elapsed is how long after the call began the request was sent that Validity counts
	// from: zero for a grant made by the call's only request, the time spent in line for a
	// queued one.
	Elapsed time.Duration
}

// Renewal is the outcome of renewing one lease.
type Renewal struct {
	// Validity, when positive and below the lease's TTL, is how long after the Renew call
	// began the store keeps the lock, measured as for Grant.Validity; zero means the lease's
	// TTL from then.
	Validity time.Duration
	// Err is nil when renewed; it matches ErrNotHeld when the owner no longer holds the lock
	// (the lock is lost); any other error means the outcome is unknown, and the Client tries
	// again until the validity deadline passes.
	Err error
}

// Info describes a lock as the backend sees it.
type Info struct {
	Name string
	// Held reports whether anyone holds the lock.
	Held bool
	// Owner is the holder's owner ID.
	Owner string
	// Count is the holder's hold count.
	Count int
	// Token is the holder's fencing token, or, when the lock is free, the last token issued if
	// the backend still knows it.
	Token int64
	// Remaining is the holder's remaining time to live; zero from a backend whose store keeps a
	// hold as long as its holder's session and does not time it (ZooKeeper).
	Remaining time.Duration
	// Meta is what the holder published about itself (WithMetadata), if anything.
	Meta string
	// Weight is, for a permit of a semaphore, how many permits its holder takes; 0 for a lock.
	Weight int
}

// Expirer is implemented by backends whose store ends a lock by its TTL alone (Redis, Redlock,
// the memory store): a Refresh that sets a TTL makes the lock go when it runs out, whether its
// holder lives or not. WithMinHold then leaves a lock released early to that TTL, and
// WithLockDelay asks for the delay on top of it. A backend whose locks live as long as a
// session (etcd, ZooKeeper) does not implement it: the Client keeps a lock released early
// until its minimum has passed, then releases it, and refuses a lock delay.
type Expirer interface {
	// ExpiresByTTL reports whether locks go when the TTL a Refresh set runs out.
	ExpiresByTTL() bool
}

// Drift is the Client's allowance for a validity v (the time the store keeps a lock, counted
// from a send): clock-rate differences between the Client and the store (1% of v) and timer
// granularity (2 ms). The Client trusts a grant for v − Drift(v) (see Grant); a backend that
// must know how long the Client will trust a lock (Redlock, to refuse a TTL that leaves no
// validity) computes it with this, never with an allowance of its own.
func Drift(v time.Duration) time.Duration { return v/100 + 2*time.Millisecond }
