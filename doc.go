// Package fencelock provides distributed locks that stay correct when things fail: a fencing
// token on every lock, a watchdog that turns a lost lock into a cancelled context, reentrancy,
// and waiting that wakes on release instead of polling.
//
// A Client obtains locks from a Backend: package redisbackend for one Redis deployment
// (single node, Sentinel or Cluster), redlock for independent Redis servers, etcdbackend,
// zkbackend for ZooKeeper, and memorybackend, an in-process store for tests and the model the
// others are compared against. Each implements the same contract, which package fencelocktest
// checks.
//
//	locker := fencelock.New(redisbackend.New(rdb))
//	defer locker.Close()
//	lock, err := locker.Obtain(ctx, "order:10086", fencelock.WithTTL(30*time.Second))
//	if err != nil {
//		return err // errors.Is(err, fencelock.ErrNotObtained) when held elsewhere
//	}
//	defer lock.Release(context.Background())
//	return store.UpdateFenced(lock.Context(), id, value, lock.Token())
//
// # Primitives
//
// Besides the lock (Client.Obtain, TryObtain, Do; several names at once with ObtainAll), a
// Client gives:
//   - Client.Semaphore: at most n holders of a name at once, each permit with its own token
//     (Redis, etcd, ZooKeeper, the memory store);
//   - Client.RWLock: many readers or one writer, whose tokens fence as a lock's do;
//   - Client.Election: a leader election on every backend, whose term is its lock's token;
//     Election.Lead runs a function while this process leads, Leader and Observe tell who does.
//
// Each is held like a lock: a watchdog renews it, and its context ends when it is lost.
// WithMaxHold, WithMinHold and WithLockDelay set how long a lock is held; WithTokenBase keeps
// tokens increasing when names move from one backend to another.
//
// # What a lock guarantees
//
// A lock is advice; the guarantee is the fencing check at the store. Every lock carries a
// token strictly greater than every token issued before for its name; a store that refuses a
// write whose token is older than one it has seen (package fence) cannot be corrupted by a
// holder that was paused, partitioned or fooled by a failover into thinking it still holds
// the lock.
//
// The holder's side of the bargain is lock.Context(): it ends the moment the lock can no
// longer be trusted — its key vanished or changed owner, or the validity deadline passed
// without a confirmed renewal — and context.Cause says which. The deadline is measured on the
// monotonic clock from the send of the request that made the grant (or of the last confirmed
// renewal), plus the time the store keeps the lock from then, minus a drift allowance (1% of
// that time plus 2ms). Each hold arms a timer for its deadline, so Done closes by itself; and
// Context().Err(), Context().Done() and Lock.Valid read the clock when called: a process
// resuming from a pause sees the loss on its first check, before any timer fires.
//
// # Deadlines
//
// Every call returns by its context's deadline plus a small slack (100 ms at most in the
// tests; see the README for the store client's part). Clean-up that must outlive a call runs in
// the background, bounded by WithCleanupTimeout, and Close waits for it.
//
// # Reentrancy
//
// Go has no thread identity, so the identity of a holder is its owner ID: a fresh 128-bit
// random value per acquisition, carried by lock.Context(). Obtaining the same name with that
// context (or with the same WithOwner) re-enters the lock; the hold count is kept in the store,
// and the lock is free only when every hold was released. On etcd (see driver.OwnerReuser) a Client
// gives the owner of a lock it released cleanly to its next acquisition of the same name, so
// that the name's queue reuses its keys instead of leaving one behind per acquisition.
//
// # Goroutines
//
// A Client runs one watchdog goroutine that renews all its locks, from its first lock until
// Close, and a goroutine per piece of background clean-up. Waiting in Obtain runs in the
// caller's goroutine. How a waiter hears of a release is the backend's: the Redis backends share
// one subscription connection per Backend (per slot on Redis Cluster); etcd and ZooKeeper watch
// the key or node just ahead in line.
package fencelock
