// Package redlock keeps fencelock locks on N independent Redis nodes (the Redlock algorithm),
// so that a lock survives the loss of a minority of them. Each node may itself be a single
// server, a Sentinel-managed master or a Cluster; the nodes share nothing and never talk to
// each other.
//
//	b := redlock.New([]redisbackend.Client{rdb1, rdb2, rdb3, rdb4, rdb5})
//	defer b.Close()
//	locker := fencelock.New(b)
//	defer locker.Close()
//	lock, err := locker.Obtain(ctx, "invoice:42", fencelock.WithTTL(30*time.Second))
//
// Create the go-redis clients with ContextTimeoutEnabled: true. The backend bounds every call
// to a node with the node timeout and stops waiting for it then; without that option go-redis
// keeps the call, and a goroutine, until its own socket timeout.
//
// # The algorithm
//
// Every node keeps a lock the way package redisbackend keeps it on one server: a hash
// <prefix>{name} {owner, token, count, h:<hold> per hold, meta} with the TTL, a fence counter
// <prefix>{name}:fence, and the release channel <prefix>{name}:released. Each operation is one
// script per node; the nodes are asked in parallel, each bounded by the node timeout
// (WithNodeTimeout; by default min(50ms, TTL/10)). An operation returns as soon as a majority
// decided its outcome, so one slow or stopped node delays nothing: the calls to the other nodes
// go on in the background, each until the node timeout, and at least 500 ms, has passed since
// it was sent (a call cancelled mid-reply costs go-redis its connection, and under load the
// handshakes of new ones made the next calls miss the node timeout in turn). An operation
// returns by its context's deadline, plus at most one node timeout when a release must clean up
// a lock it left on a node; the release of a failed acquisition's grants runs in the
// background. One owner's calls on one lock keep their order node by node: a release, a
// reentrant acquire, a token write or the undo of a failed acquisition on a node waits until
// the owner's call before it there has returned, and the owner's next call waits for it, so
// that none overtakes another; the next acquisition of the lock through the same Backend, of
// any owner, also waits on each node for the undo of a failed one, so that it never meets the
// hold of an attempt that failed before it; a call that waited has its node timeout, and at
// least 500 ms, from when it is sent.
// Close is final: it waits for the operations under way and then for the calls they left in
// the background, and every call after it fails with an error matching driver.ErrClosed.
//
// Acquire takes the lock on every node it can. The lock holds when a majority, N/2+1, granted
// it before the TTL less the drift allowance (TTL/100 + 2ms) had passed since the requests
// were sent: the Client's own rule, so that Redlock refuses no grant the Client would take.
// Otherwise the hold is released again on every node that may have granted it, those that
// did not answer included, and the error says why: a
// *driver.HeldError when other owners hold enough nodes to deny a majority (Remaining is how
// long until enough of their keys expire), a *QuorumError (matching driver.ErrUnavailable,
// with a *NodeError per failed node) when too many nodes failed, ErrValidityExpired (also
// matching driver.ErrUnavailable: nobody holds the lock, the nodes were too slow) when the
// time ran out, and the context's error when the context ended. The Client retries after a
// release notification or the holder's remaining TTL.
//
// Grant.Validity and Renewal.Validity are the TTL, counted from the send, as the backend
// contract has it (driver.Grant): each node that granted or extended the lock keeps it a TTL
// after it received the request, and the requests went out after the moment the Client counts
// from. Grant.Elapsed is how long the call ran before it sent them (the first call asks the
// nodes for their run_id first). Neither is net of the round trips or of the drift allowance:
// the Client subtracts the drift allowance once, and the round trips are behind the send. A
// Client therefore trusts a lock for the TTL less the drift allowance from the send, however
// slow the links, as long as the grant arrives within that time; to keep a lock, a renewal
// must go out after the grant arrived and be back before then, so a round trip must stay below
// half of that.
//
// Renew extends a batch of leases with one pipeline per node, and waits for the nodes as long
// as the greatest node timeout of the batch's leases, so that a lease with a short TTL does not
// cut short the wait for the others. A lease stays valid when a majority extended it within
// the TTL less the drift allowance; it is lost (driver.ErrNotHeld) when a majority
// says the owner no longer holds it; anything else is an unknown outcome the Client retries
// until its validity deadline. A node that lost the key — restarted without persistence, or cut
// off until the key expired there — gets it back for the same owner, token and count, but only
// after a majority confirmed the lease, and only if the key is still free on that node.
//
// Release ends one hold on every node. Hold IDs make a retried acquire or release count once,
// per node, as on one server. The count left is what a majority still holds; when that is
// zero, a node that still keeps the lock with no hold ID left (one that took the key back, and
// so knows no hold IDs) is cleared too.
//
// Waiters subscribe to the release channel on every node, through one pub/sub connection per
// node shared by all waiters of the Backend, and wake when any node announces a release.
//
// # Fencing tokens
//
// Counters kept per node and a token made of the greatest would not do: with counters A=5 and
// B=C=2, a majority with A gives 6, and a later majority without A gives 3. A token must be
// stored on a majority before it is handed out. A first acquisition therefore proposes a
// token with its request — the Backend's clock in µs, above its own last proposal — and each
// node that grants the lock stores the proposal as its fence counter, with a set-if-greater,
// in the same script. When every node of the granting majority stored it, that is the token:
// one round trip, as on one server. When a node's counter was at or beyond the proposal (a
// client clock behind another's, or counters raised by hand), the acquisition takes a second
// round: the candidate is max(greatest counter read + 1, greatest server clock read in µs),
// written back to every node with a set-if-greater script; a node whose counter is already at
// or beyond the candidate makes it take that counter plus one and write again. Each write
// waits, on its node, for the acquire call there, and records the token in the lock: the nodes
// agree on it.
//
// A reentrant acquisition keeps the holder's token, at no cost, when a majority of the nodes
// keep the owner's lock from before with that token (and no greater fence counter): then no
// other owner can have held the lock since. One node's memory is not enough: with an owner
// reused across acquisitions (fencelock.WithOwner), a node that a release did not reach keeps
// the owner's old lock, other owners may take the lock on the other nodes with greater tokens,
// and that node would grant the owner's next acquisition as a second hold of the old one. When
// the nodes disagree, the acquisition waits for the others as long as they could still make a
// majority for one token; failing that, it keeps the token of the lock its caller holds
// (driver.Request.Token) when no granting node's fence counter or token is above it, and
// otherwise takes a new token (by the proposal or a token round). The holds the nodes keep
// stay, under the new token, whatever the acquisition saw: they may be live holds of the same
// owner in another process, on a majority this acquisition could not confirm (a node that
// answered late), or made by that process's acquisition landing on the nodes between this one's
// acquire calls and its token writes. A process holding one of them keeps the old token, so its
// fenced writes are refused from then on, but no other owner takes the lock while those holds
// last, and its release still ends its hold. Holds of a lock that was lost, kept on a node that
// a release did not reach, stay there until their TTL: a release that a majority answered as
// free deletes the lock on the nodes that still keep it for the owner only where no hold ID is
// left (a node that took the key back after a restart keeps none), since a hold there may be
// another process's whose acquisition is landing; and a node where the owner holds a later
// lock, without the released hold, is not free.
//
// What this guarantees: no two acquisitions get a majority to store the same token (two
// majorities share a node, and the second write there finds the counter at the token already),
// and a token is greater than every token returned before its acquisition began — provided a
// majority of the nodes still keep their counters, each at least as great as the tokens they
// stored. A node loses its counters
// when it restarts without persistence, or when the fence retention (WithFenceRetention,
// default 24h) passes without an acquisition of that lock. Once a majority has lost them the
// server clock carries the order, which holds as long as the nodes' clocks agree to within the
// time between two acquisitions of the lock and do not step back (the proposals add the
// clients' clocks to that: they too should agree, within the same bound). Run the nodes with
// appendonly yes (appendfsync always, for counters that survive a power loss) and NTP. The
// scripts compare counters as Lua numbers, exact up to 2^53: µs clocks stay below that until
// the 23rd century; a counter raised beyond it by hand breaks the comparison.
//
// # What the lock guarantees, and what it does not
//
// Redlock's safety rests on timing assumptions: that network delays, process pauses (GC, a
// stopped VM) and clock drift between the client and the nodes stay within the drift
// allowance and the validity. Martin Kleppmann's critique ("How to do distributed locking",
// 2016) holds: a holder paused after its last check, a node whose clock jumps forward and
// expires the key early, or a node restarted empty right away (the lock is then on a minority
// and another client can take a majority) can all give two holders at once. The Client's lock
// context ends when the validity deadline passes on the monotonic clock, which narrows the
// first case but cannot close it. Restart a node that lost its data only after the longest TTL
// in use has passed (a delayed restart), so that no lock it held is still relied on.
//
// The fencing token is what makes the protected store safe: a store that refuses a write whose
// token is older than one it has seen (package fence) rejects the late writes of a holder that
// was paused or fooled. Use Redlock for a lock that survives the loss of a minority of
// independent Redis nodes, with fencing where an overlap costs money; for a lock that must be
// correct by construction, use a consensus backend (etcd, ZooKeeper).
//
// # Configuration checks
//
// New refuses an even N or fewer than 3 nodes (an even N tolerates no more failures than N−1,
// and 1 of 1 or 2 of 2 is no quorum), a nil client and the same client twice. Two different
// clients to one server cannot be told apart without asking the servers: the first acquisition
// reads every node's INFO server run_id (every master's, for a Cluster) and fails with
// driver.ErrInvalid, from then on, when two nodes share one. A node that did not answer
// then is asked again by later calls, at most once a second, and its grants and renewals do
// not count towards a majority until it has answered. A TTL that the node timeout and the
// drift allowance leave no validity in is refused with driver.ErrInvalid.
package redlock
