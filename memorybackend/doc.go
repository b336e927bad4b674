// Package memorybackend keeps fencelock's locks, semaphores, read-write locks and elections in
// memory, with the semantics of the real backends: reentrancy by owner, fencing tokens that only
// grow, a fair line of waiters that a release hands the lock to, weighted permits whose holders
// agree on a limit, loss pushed to the holder, Inspect, List and ForceRelease. It passes every
// conformance suite of package fencelocktest.
//
// It is for tests: of code that uses fencelock, and of fencelock itself. A Store is one store,
// as one Redis server is; each Client gets a Backend of its own from it, as each process has its
// own connection:
//
//	store := memorybackend.New()
//	a := fencelock.New(store.Backend())
//	b := fencelock.New(store.Backend())
//
// Expiry runs on the time package's clock, so a Store works in real time and, unchanged, in the
// virtual time of a testing/synctest bubble: a test of a job that runs for an hour under a lock
// with a 30 s TTL takes microseconds. Callers that wait (a line, a partition, a delayed reply)
// wait on channels and timers, which a bubble counts as durably blocked; no Store call blocks on
// anything else.
//
// # Making things go wrong
//
// The Store and its Backends are a test kit: a test makes happen, at the moment it chooses,
// what a real deployment does at random.
//
//   - Store.Expire and Store.ExpirePermit end a lock or a permit now, as a TTL that ran out
//     while its holder was paused; the holder's context ends at once (the Backend pushes the
//     loss, as the Redis backend does), the next waiter gets the lock.
//   - Store.Forget forgets everything, as a Redis restarted without persistence; Store.ForgetName
//     forgets one name, as an eviction. Tokens still grow: the Store's token counter is kept, as
//     Redis's tokens are kept by its clock.
//   - Backend.DropNextReply loses the reply of the Backend's next call, which was applied or not:
//     the caller cannot tell, and the Client cleans up as after a timeout.
//   - Backend.DelayNextReply applies the next call at once and answers it later.
//   - Backend.Partition holds the Backend's calls back for a while: they reach the store when it
//     ends, or fail when their context ends first. Renewals fail meanwhile, and the Client's
//     validity deadline ends its locks as it would behind a cut link.
//
// # How it differs from the real stores
//
// A lock whose holder let it expire goes to the first waiter in line at once (Redis gives it to
// the first waiter at that waiter's next attempt). A grant is valid for its whole TTL from the
// moment the Store made it (Redis hands a lock over for at most 5 s, extended by the first
// renewal). A Backend has no session: its locks live until their TTL, however the Backend ends.
// There is no network, so no call is slow unless a fault says so.
package memorybackend
