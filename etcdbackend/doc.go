// Package etcdbackend keeps fencelock locks in etcd: a correctness lock, when its fencing
// token is checked where the protected data lives.
//
// A lock named N is a queue of keys under <prefix><N>/, one key per owner waiting for or
// holding the lock, each attached to a lease. The owner whose key has the smallest create
// revision holds the lock; the others wait in that order (first come, first served). A
// waiter with at most 16 keys ahead, which it learns of from its own put, watches the queue
// and holds the lock on hearing of the deletion of the last of them, with no read after it: a
// hand-over costs the release and the watch event. One further back watches only the key
// just before its own, so that a release wakes a bounded number of waiters however long the
// line (no thundering herd). The name is path-escaped, so that a lock "a" never sees the keys of a lock "a/1". What a holder
// publishes with WithMetadata is kept beside the queue, at <prefix>!meta/<N>/<owner>, on the
// same lease: "!" is escaped in every name, so no lock's queue covers these keys, whether or
// not the prefix ends with a slash.
//
// etcd keeps a deleted key in its index until the cluster is compacted, and each acquisition
// reads its lock's queue, walking those traces too. So that a name taken and released again
// and again does not make a key per acquisition, the Backend is a driver.OwnerReuser: a
// Client gives the owner of a lock it released cleanly to its next acquisition of that name,
// and the queue reuses that owner's key. A waiter waits for the deletion of the key it saw
// ahead of it (its create revision), not for a key of that name. Run etcd with
// auto-compaction all the same: a name taken by many processes, or with WithOwner IDs of
// one's own, still leaves a trace per owner.
//
// # Leases and TTL
//
// A Backend keeps one lease per distinct TTL, rounded up to whole seconds, and keeps it alive
// itself: a goroutine per lease sends a keep-alive (LeaseKeepAliveOnce) every third of the
// TTL, and notes when each one was sent. A lock's key is attached to the lease of the TTL of
// its first acquisition. The etcd server enforces a minimum lease TTL (about 1.5 × its
// election timeout; 2 s with an embedded etcd's defaults), and extends shorter leases to it.
// When a lease expires — the process stopped, or its keep-alives stopped reaching the cluster
// for a whole TTL — etcd deletes every key on it, the next waiter holds the lock, and the old
// holder's renewal finds its key gone: its context is cancelled.
//
// A grant or a renewal says the lock lives from the send of the request that made or found
// its key until the lease that key is on is known to end: the send of that lease's last
// confirmed keep-alive plus the TTL the server answered with. The Client trusts the lock no
// longer than that, minus its drift allowance, even when it asked for a longer TTL.
//
// The etcd client dials again after a dropped connection through gRPC's reconnect backoff,
// which waits a second (1 s ± 20%, growing 1.6× per failed dial) once the first, immediate
// dial failed: a 50 ms cut costs about a second without keep-alives, half of a 2 s TTL. With
// TTLs of a few seconds, give the client a shorter backoff (the Backend cannot change a client
// it is given):
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints: endpoints,
//		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
//			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
//			MinConnectTimeout: time.Second,
//		})},
//	})
//
// # Reentrancy
//
// The key's value is the hold count and the hold IDs ("count\nhold\nhold..."), changed only by
// transactions that compare the key's create and mod revisions, so a retried release never
// decrements twice and a stale release never deletes a newer holder's key. A release that
// carries its lock's token (the Client's do) compares the key's create revision as well, so a
// late release of an owner's earlier lock never ends the owner's later one. The release every
// lock makes — the only hold of a Client's own owner, the one that made the key — compares the
// key's mod revision alone: a key not written since it was made is that hold's, alone; one
// written since (another Client joined under the owner) is read and rewritten as above. It
// deletes the metadata key only when that hold published metadata. A reentrant
// acquisition adds its hold to the key and leaves the key on its lease: re-entering a lock
// with a longer TTL does not make it live longer.
//
// WithOwner in two processes: the second process's holds go into the key the first one made,
// on the first one's lease, which only the first one's Backend keeps alive. The second
// Backend does not extend that lease; it vouches for what etcd reports is left of it
// (LeaseTimeToLive, whole seconds rounded down), counted from when it asked, and asks again at
// every renewal. Its holds end with that lease: when the first Backend closes, or its process
// stops reaching etcd.
//
// # Failures
//
// A release whose outcome is unknown, or a waiter's leaving the line that fails or comes after
// the caller's deadline, is owed: the Backend retries it in the background at every keep-alive,
// and every second when none runs, until it is done. Close revokes the leases, which deletes every key on them, and then stops
// that work and waits for it. A later acquisition of the same hold (the
// retry of one whose outcome was lost) that takes the key back voids what was owed of it.
//
// etcd may apply an acquisition's write after its caller's context ended, and after a
// clean-up sent later: so the write is seen to its outcome. The caller returns at its deadline;
// the Backend awaits the reply in the background, for up to 2s more, and releases what the
// write made. A Release of that hold waits for the outcome first. A write whose outcome stays
// unknown is vetoed before its release is tried: each write requires that a veto key of its
// own, under <prefix>!veto/, be absent, and the clean-up puts that key on the write's lease,
// where it stays while the write could still be applied.
//
// # Fencing
//
// The fencing token is the create revision of the holder's key: cluster-wide, strictly
// increasing, never reused. (Never the lease ID, which is not ordered.) Writes that live in etcd
// itself can be guarded without any other store: Guard returns the comparison that holds only
// while the lock's key still exists with that revision, for a transaction's If.
package etcdbackend
