// Package fencelock provides distributed locks that stay correct when things fail: a fencing
// token on every lock, a watchdog that turns a lost lock into a cancelled context, reentrancy,
// and waiting that wakes on release instead of polling.
//
// A Client obtains locks from a Backend: package redisbackend for one Redis deployment
// (single node, Sentinel or Cluster); further backends (Redlock, etcd, ZooKeeper) implement
// the same contract.
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
// without a confirmed renewal. The deadline is measured on the monotonic clock from the moment
// the acquire was sent, minus a drift allowance (1% of the TTL plus 2ms), and Context().Err(),
// Context().Done() and Lock.Valid read the clock when called: a process resuming from a pause
// sees the loss on its first check, before any timer fires.
//
// # Reentrancy
//
// Go has no thread identity, so the identity of a holder is its owner ID: a fresh 128-bit
// random value per acquisition, carried by lock.Context(). Obtaining the same name with that
// context (or with the same WithOwner) re-enters the lock; the hold count is kept in the store,
// and the lock is free only when every hold was released.
//
// # Goroutines
//
// A Client runs one renewal goroutine for all its locks, from its first lock until Close.
// Waiting in Obtain runs in the caller's goroutine; release notifications come through one
// subscription per Client (per slot on Redis Cluster) that ends when the last waiter stops.
package fencelock
