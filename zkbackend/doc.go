// Package zkbackend keeps fencelock locks in ZooKeeper, with the classic recipe: ephemeral
// sequential nodes in line, the first of which holds the lock.
//
//	conn, _, err := zk.Connect(servers, 10*time.Second)
//	...
//	locker := fencelock.New(
//		zkbackend.New(conn, zkbackend.WithSessionTimeout(10*time.Second)),
//		fencelock.WithDefaults(fencelock.WithTTL(10*time.Second)),
//	)
//
// # Data model
//
// The lock N is the directory <root>/N (root "/fencelock" by default); its children
// _c_<guid>-lock-<sequence> are the contenders, in the order of their sequence numbers. A
// node's data is the owner ID and the IDs of the owner's holds: a format byte (1), then the
// owner and each hold ID as a uvarint length followed by the bytes. The hold count is the
// number of hold IDs, so a retried acquire or release cannot count twice, and every change is
// a compare-and-set on the node's version. A reentrant acquisition adds a hold to the owner's node; releasing the last
// hold deletes the node, and the directory with it when no one else is in line, so a name leaves
// nothing behind once no one holds or wants it. (A node that vanished with an expired session
// leaves its empty directory until the name is next used.) Lock names must be one path element:
// a name with '/' is refused.
//
// An uncontended acquisition is one round trip (the directory and the node are created in one
// multi-operation), and so is an uncontended release.
//
// Obtain waits in line (fencelock.Queue): each waiter watches only the node just ahead of it,
// so a release wakes one waiter, and the lock passes first come, first served. A waiter whose
// context ends deletes its node and leaves the line.
//
// The GUID in each node's name is Curator's protection mode: when the connection drops before
// the reply to a create arrives, the backend looks for its node by GUID after reconnecting
// instead of leaving an unknown node in line.
//
// # Fencing tokens
//
// The token is the lock node's czxid, the ZooKeeper transaction ID that created it: unique,
// and strictly greater than the token of every earlier holder of the name, since ZooKeeper
// orders all writes in one sequence. A reentrant acquisition returns the token of the node it
// enters.
//
// # Time to live, disconnects and expiry
//
// A lock lasts as long as the ZooKeeper session of the connection that holds it, and the TTL
// of fencelock's options is not sent to the server: the session timeout is the real TTL. The
// server grants a session timeout between its minSessionTimeout and maxSessionTimeout, 2 and
// 20 times its tickTime unless configured; go-zookeeper does not report the value granted, so
// WithSessionTimeout must name it.
//
// The Client's watchdog calls Renew, which confirms that the session is connected and the
// node still there, and vouches for one session timeout from then: after last hearing from a
// client the server keeps its session at least that long. Use the session timeout as the TTL
// (fencelock.WithTTL): the watchdog confirms every TTL/3 and trusts each confirmation for one
// session timeout, so with a TTL of about three session timeouts or more the lock would count
// as lost between two confirmations.
//
//   - A disconnect is not a loss. go-zookeeper reconnects within the session timeout and the
//     session, its nodes and the lock survive; meanwhile Renew reports fencelock.ErrUnavailable
//     and, when the validity deadline passes first, the Client ends the lock's context with
//     fencelock.ErrLost. The server may still be keeping the lock then, until it expires the
//     session.
//   - A session expiry is a loss. The server deletes the session's nodes, and the next waiter
//     holds the lock. The backend notices when the session ID of the connection changes (which
//     go-zookeeper does when the server reports the session expired): from then on Renew
//     reports fencelock.ErrNotHeld for every lock it held, and a waiter in line under that
//     session returns fencelock.ErrUnavailable, for the Client to queue again.
//
// The Client stops trusting a lock no later than the server can expire its session, so an
// expiry never lets the old and the new holder both think they hold the lock, as long as the
// client's process is not paused between checking and acting. That gap is what the fencing
// token closes: with the token checked at the store, this is a correctness lock.
//
// # Compared with go-zookeeper's zk.Lock
//
// zk.Lock takes no context, so a waiter cannot give up; it leaves a persistent node per lock
// path forever; and it parses every child of the lock's path as a contender, so the lock /a
// takes the nodes of a lock /a/1 for waiters. This backend honours the context while waiting,
// removes the directory with the last node, ignores children it did not name, and refuses
// names that would nest.
//
// go-zookeeper's calls take no context: the backend checks the context before each call and
// while it waits, but a call in flight runs to go-zookeeper's own timeouts.
package zkbackend
