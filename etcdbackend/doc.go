// Package etcdbackend keeps fencelock locks in etcd: a correctness lock, when its fencing
// token is checked where the protected data lives.
//
// A lock named N is a queue of keys under <prefix><N>/, one key per owner waiting for or
// holding the lock, each attached to a lease. The owner whose key has the smallest create
// revision holds the lock; every other waits for the deletion of the key just before its own,
// watching only that key (no thundering herd, first come first served). The name is
// path-escaped, so that a lock "a" never sees the keys of a lock "a/1".
//
// # Leases and TTL
//
// A Backend keeps one lease per distinct TTL, kept alive in the background by etcd's
// concurrency.Session; a lock's key is attached to the lease of its TTL, rounded up to whole
// seconds. The etcd server enforces a minimum lease TTL (about 1.5 × its election timeout;
// 2 s with an embedded etcd's defaults), and extends shorter leases to it. When a lease
// expires — the process stopped, or its keep-alives stopped reaching the cluster for a whole
// TTL — etcd deletes every key on it, the next waiter holds the lock, and the old holder's
// renewal finds its key gone: its context is cancelled. The Client trusts a lock no longer than
// the lease's remaining TTL as the server last reported it (LeaseTimeToLive), measured from when
// that question was sent.
//
// # Fencing
//
// The fencing token is the create revision of the holder's key: cluster-wide, strictly
// increasing, never reused. (Never the lease ID, which is not ordered.) Writes that live in etcd
// itself can be guarded without any other store: Guard returns the comparison that holds only
// while the lock's key still exists with that revision, for a transaction's If.
//
// # Reentrancy
//
// The key's value is the hold count and the hold IDs ("count\nhold\nhold..."), changed only by
// transactions that compare the key's create and mod revisions, so a retried release never
// decrements twice and a stale release never deletes a newer holder's key.
package etcdbackend
