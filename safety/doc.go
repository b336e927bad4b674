// Package safety runs the known failure stories of distributed locks against real servers and
// counts what went wrong: lost acknowledged additions, stale writes accepted or refused by a
// fenced store, overlapping holds. Workers are separate processes (re-executions of the test
// binary), so that they can be paused with SIGSTOP like a process in a long GC pause.
//
// The workload follows Jepsen's lock-set: a worker obtains the lock, reads a set from the store,
// sleeps a random time up to the TTL, writes the set back with one more element and its fencing
// token, and releases. A fenced store accepts a write only if its token is not older than the
// newest one it accepted; an unfenced store accepts everything, to show what fencing buys.
package safety
