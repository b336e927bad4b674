// Package driver is the contract between fencelock's Client and a store: what a backend
// implements, for the people who write one. Users of fencelock need none of it but the
// Backend they pass to fencelock.New; the types they see (Info, SemaphoreInfo, the errors) are
// fencelock's under the same names.
//
// # What a backend implements
//
// Backend's four methods: Acquire makes one attempt to take a lock for an owner, or enters it
// once more for the owner that holds it; Renew extends a batch of leases; Release ends one
// hold; Inspect reads a lock. A backend keeps, per lock name, the owner, a hold count (each
// hold named by an ID, so that a retried Release never ends two), and a fencing token strictly
// greater than every token issued before for that name, however the store fails.
//
// The Client does the rest: it checks arguments before a backend sees them, waits and retries
// (Acquire is one attempt), runs the watchdog that renews, keeps each lock's validity
// deadline, counts reentrant holds per owner, tells the observer, and cleans up after
// ambiguous outcomes (below). A backend must be safe for concurrent use.
//
// # What each optional interface buys
//
// The Client asks for each with a type assertion:
//
//   - Queue: waiters wait in the store's line, first come first served, and are handed the
//     lock on a release (AcquireQueued); a Queue calls Request.StartWait when a request begins
//     to wait behind another holder, which tells the Client its grant is a hand-over. Without
//     it, Obtain retries Acquire, sleeping until a release (ReleaseWatcher) or the holder's
//     TTL.
//   - ReleaseWatcher: a waiter outside a line wakes on a release; without it, at the holder's
//     TTL or its next poll.
//   - LossWatcher: a holder learns of a lost lock from a push; without it, at its next renewal.
//   - HolderWatcher: Election.Observe looks when the store says the holder changed; without
//     it, it polls.
//   - Semaphores (with SemaphoreNamer to list them): the Client's semaphores and read-write
//     locks. Without it, they fail with an error matching ErrInvalid.
//   - Namer: fencelock.List lists locks. Publisher: Leadership.Proclaim. LineLister:
//     Election.Candidates. ForceReleaser: an operator's release of a lock whoever holds it.
//   - Expirer: the store ends a lock by its TTL alone, so a lock released before its
//     minimum (WithMinHold) is left to a TTL, and WithLockDelay is possible. Without it, the
//     Client keeps such a lock until its minimum and refuses a lock delay.
//   - OwnerReuser: the store keeps a trace of each deleted key (etcd); the Client then gives a
//     cleanly released owner ID to the next acquisition of the name.
//
// # Who undoes what
//
// An Acquire whose outcome is unknown — its reply lost, its context ended while the request
// was on its way, an error that does not say the store refused — may have taken the lock. The
// Client undoes it: it releases that hold (Release with the hold's ID and token 0) in the
// background, bounded by its cleanup timeout, and its next attempt takes a fresh owner unless
// the caller chose one. A backend returns such an outcome as an error matching ErrUnavailable;
// it returns a *HeldError, ErrInvalid or ErrClosed only when the store did not take the lock,
// or marks the error with MayHold when the store refused a step after the one that may have
// taken it. A backend never undoes an acquisition itself. A queued attempt that fails so
// leaves the line it may have joined.
// A Release whose outcome is unknown is retried by the Client with the same hold ID, so a
// backend's Release must be idempotent per hold.
//
// # The validity rule
//
// The Client trusts a grant from the send of the request that made it (Grant.Elapsed after
// the call began) for v less its drift allowance (1% of v plus 2 ms), v being Grant.Validity
// when it is positive and below the TTL, else the TTL. A backend says only what the store
// keeps, counted from a send it can show came before the grant; it never subtracts drift or
// its own round trips. A Renewal is counted the same way from the Renew call's start. A
// renewal's error matching ErrNotHeld ends the lock; any other leaves its outcome unknown, and
// the Client tries again until the deadline.
//
// # What a permit is
//
// With Semaphores, a Request or Lease whose Limit is positive names a permit of the semaphore
// Name, not the lock Name: one of Limit permits, taken by Owner with Weight (a read-write
// lock's writer takes RWReaders of RWReaders). Its token increases per name as a lock's does;
// its limit is the one the holders agreed on, and a request with another limit while permits
// are held fails with a *LimitError. A semaphore and a lock of the same name are unrelated.
//
// # The acceptance test
//
// Package fencelocktest runs the Client's whole contract against a backend — conformance
// cases for locks, semaphores, read-write locks and elections, and seeded histories compared
// step by step with memorybackend, the model — the way redisconntest runs an adapter's. A
// backend is done when its TestConformance passes.
package driver

// RWReaders is the number of permits of a read-write lock: a reader takes one, a writer all.
const RWReaders = 1 << 20
