// Package fence is the store side of fencing tokens: guards that accept a
// write only if it carries a token at least as new as the newest token
// already accepted for the resource.
//
// # Why a guard
//
// A distributed lock hands its holder a fencing token, an int64 that is
// strictly increasing per lock name and never reused. Holding the lock is
// only advice: a holder can be paused (GC, swapping, a slow network) past
// its lease, the lock passes to someone else, and the first holder then
// wakes up and writes, still believing it holds the lock. No check made by
// the holder before writing can close that window, because the pause can
// fall between the check and the write.
//
// The guarantee therefore has to come from the store that receives the
// write. Each write carries the writer's token; the store remembers, per
// resource, the newest token it has accepted and refuses older ones,
// atomically with the write. The late holder's token is older than the one
// its successor already used, so its write is refused, whatever the timing.
//
// # The rule
//
// Tokens are unique per holder: two holders never share one, and a
// reentrant holder re-uses its own. "Accept only a token strictly greater
// than the last one seen from another holder" is therefore exactly:
//
//	accept iff token >= latest accepted token for the resource
//	on accept, latest = max(latest, token)  (== token)
//
// A refused write returns a *StaleError, which matches ErrStale with
// errors.Is and reports the resource, the refused token and the latest
// token. Invalid arguments (an empty resource or key, a token <= 0, a nil
// database or client) return an error wrapping ErrInvalid.
//
// # Guards
//
//   - Memory guards state held in this process; Memory.Do runs the write
//     while holding the resource's guard.
//   - SQL keeps the latest token per resource in a PostgreSQL table
//     (default fence_tokens). SQL.Check runs a conditional upsert inside
//     the caller's transaction (a Tx: a *sql.DB or *sql.Conn does not
//     qualify), before the caller's own write; SQL.Update wraps check,
//     write and commit in one transaction.
//   - Redis keeps a value and its token together in a hash and replaces
//     them with an atomic Lua script.
//
// A guard protects only writes that go through it: every writer of the
// protected data must use the same guard with the same resource name.
//
// # Isolation levels
//
// Two transactions that Check the same resource meet on its row: the
// second waits until the first ends. What it does then depends on its
// isolation level:
//
//   - READ COMMITTED (PostgreSQL's default): it re-reads the newest
//     committed token. Its answer is final: nil, and it writes after the
//     first, or a *StaleError, and it must not write.
//   - REPEATABLE READ: if the first committed, the second fails with a
//     serialization failure (SQLSTATE 40001), whatever its token: a newer
//     token fails too. That is not a refusal. Roll back and run the whole
//     transaction again; the retry's Check gives the final answer. The
//     same failure comes when the row changed after the transaction's
//     snapshot was taken, without any waiting.
//   - SERIALIZABLE: as REPEATABLE READ, and a serialization failure may
//     also come from any later statement or from Commit; retry the same
//     way.
//
// IsSerializationFailure tells the failure apart. Treating it as a
// refusal is safe, in that no stale write lands, but it drops the newer
// holder's write. At every level, no token older than one already
// committed ever writes after it.
//
// # A paused holder
//
// The row lock that orders two checks lasts until the transaction ends, so
// a holder paused inside its transaction (GC, swapping, SIGSTOP) holds up
// every other holder of the resource for the whole pause, whatever the
// lock's TTL. SQL.WithBounds bounds both sides, for the transaction only:
// the lock wait (PostgreSQL's lock_timeout; past it Check fails with an
// error matching ErrBusy) and the idle time between statements
// (idle_in_transaction_session_timeout; past it the server ends the paused
// session, its row lock with it, and nothing of its transaction is
// committed). Set idle_in_transaction_session_timeout in postgresql.conf to
// bound every session of every client the same way. Fencing still decides
// which write wins: the bounds only end waits.
//
// # Keeping the token in your own row
//
// With SQL you can also skip the token table and keep the token in a
// column of the row being written, here items.fence (BIGINT NOT NULL
// DEFAULT 0). Make the fence check part of the write itself and look at
// the number of rows affected:
//
//	res, err := tx.ExecContext(ctx,
//		`UPDATE items SET stock = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
//		stock, token, id)
//	if err != nil {
//		return err
//	}
//	if err := fence.CheckRows(res, "item:"+id, token); err != nil {
//		return err // errors.Is(err, fence.ErrStale); Latest is 0 (unknown)
//	}
//
// The UPDATE locks the row, and a concurrent UPDATE re-reads the
// committed fence before applying its WHERE, so a stale writer changes
// nothing. 0 rows affected means stale, or that the row does not exist:
// create rows first (with fence 0) or insert them with an INSERT ... ON
// CONFLICT ... DO UPDATE ... WHERE that applies the same condition.
package fence
