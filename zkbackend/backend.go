package zkbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/settle"
)

// Backend is a driver.Backend, driver.Queue, driver.Semaphores and
// driver.LossWatcher over one ZooKeeper connection. It is safe for concurrent use. Its
// goroutines — the settler of what it owes, and requests whose callers stopped waiting — run
// only while there is such work, but one: from its first call until Close, or until its
// session ends, one keeps the watch of the session's end (end.go). Close waits for them.
type Backend struct {
	conn     *zk.Conn
	root     string
	acl      []zk.ACL
	validity time.Duration // the session timeout
	err      error         // set when the configuration is unusable; every call returns it

	ctx    context.Context // ends on Close; the settler's requests run under it
	cancel context.CancelFunc

	registered atomic.Int64               // the session this Backend last registered (sessions.go)
	end        atomic.Pointer[sessionEnd] // the watch of its current session's end (end.go)
	flights    flights                    // the Backend's goroutines, but the settler's
	closed     atomic.Bool

	owed *settle.Ledger[owed] // the removals owed (see owed.go), and their settler
	down downLooks            // the settler's alone, under owed's lock (closedConn)
	away bool                 // the settler's alone, under owed's lock: it saw no session (noSession)

	mu       sync.Mutex          // guards held and busyDirs
	held     map[holder]*holding // lock nodes that hold a lock for an owner, as last seen
	busyDirs map[string]struct{} // directories that held others' nodes when last seen (busy)
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Queue       = (*Backend)(nil)
	_ driver.LossWatcher = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithRoot sets the node under which every lock lives: the lock N is <root>/N. It must be an
// absolute path without a trailing slash, outside /zookeeper. Default: "/fencelock".
func WithRoot(path string) Option { return func(b *Backend) { b.root = path } }

// WithACL sets the ACL of every node the backend creates. Default: zk.WorldACL(zk.PermAll).
func WithACL(acl []zk.ACL) Option { return func(b *Backend) { b.acl = acl } }

// WithSessionTimeout tells the backend the session timeout the server granted the connection:
// a lock is vouched for that long after the server last confirmed it. Give the timeout passed
// to zk.Connect, provided it lies within the server's bounds (2 to 20 times its tickTime by
// default); the server grants a value inside those bounds, and go-zookeeper does not report it.
// A value larger than the one granted would let the Client trust a lock after the server has
// already given it to someone else. Required.
func WithSessionTimeout(d time.Duration) Option { return func(b *Backend) { b.validity = d } }

// New returns a Backend over conn. A nil conn, a missing session timeout or an unusable option
// gives a Backend whose every call fails with an error matching driver.ErrInvalid.
func New(conn *zk.Conn, opts ...Option) *Backend {
	b := &Backend{
		conn: conn,
		root: "/fencelock",
		acl:  zk.WorldACL(zk.PermAll),
		held: make(map[holder]*holding),

		busyDirs: make(map[string]struct{}),
	}
	for _, o := range opts {
		o(b)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.owed = b.newLedger()
	switch {
	case conn == nil:
		b.err = fmt.Errorf("%w: nil *zk.Conn", driver.ErrInvalid)
	case b.validity <= 0:
		b.err = fmt.Errorf("%w: session timeout not set: pass WithSessionTimeout with the timeout given to zk.Connect (go-zookeeper does not expose the negotiated one)", driver.ErrInvalid)
	case len(b.acl) == 0:
		b.err = fmt.Errorf("%w: empty ACL", driver.ErrInvalid)
	default:
		if err := checkRoot(b.root); err != nil {
			b.err = err
		}
	}
	return b
}

// Close waits until the work the Backend owes is done (see owed.go), and stops it, and waits
// for the requests of calls that returned before their answer came; all of it for at most
// CloseTimeout. It returns an error matching driver.ErrUnavailable when work was left
// undone: those lock nodes end with the session, when the caller closes the connection (the
// Backend does not: the connection is the caller's). Calls after Close fail with an error
// matching driver.ErrClosed. Close is idempotent.
func (b *Backend) Close() error {
	if b == nil || b.ctx == nil {
		return nil
	}
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	deadline := time.Now().Add(CloseTimeout)
	bound, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	select {
	case <-b.owed.Settled():
	case <-bound.Done():
	}
	b.cancel()
	b.owed.Close()
	idle := b.flights.wait(deadline)
	select {
	case <-b.owed.Done():
	case <-bound.Done():
		idle = false
	}
	left := b.owed.Len()
	switch {
	case left > 0:
		return fmt.Errorf("%w: closed with the removal of %d lock node(s) not made: they end with the session", driver.ErrUnavailable, left)
	case !idle:
		return fmt.Errorf("%w: closed with requests to ZooKeeper unanswered after %v", driver.ErrUnavailable, CloseTimeout)
	}
	return nil
}

// Path returns the node of the lock name: its directory, whose children are the queue of
// contenders, the first of which holds the lock.
func (b *Backend) Path(name string) string { return b.root + "/" + name }

// usable reports why name cannot be locked with b.
func (b *Backend) usable(ctx context.Context, name string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	return ctx.Err()
}

// ready reports why b cannot be used now, but for ctx having ended; it records b's session for
// vouching (sessions.go).
func (b *Backend) ready(ctx context.Context) error {
	if b == nil {
		return fmt.Errorf("%w: nil Backend", driver.ErrInvalid)
	}
	if b.err != nil {
		return b.err
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", driver.ErrInvalid)
	}
	if b.closed.Load() {
		return fmt.Errorf("%w: the ZooKeeper backend was closed", driver.ErrClosed)
	}
	b.register()
	return nil
}

// checkName accepts a lock name that is exactly one path element. A '/' would nest one lock's
// directory inside another's, where the inner lock's nodes would pass for the outer lock's
// waiters (go-zookeeper's zk.Lock has that bug).
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name", driver.ErrInvalid)
	case name == "." || name == "..":
		return fmt.Errorf("%w: lock name %q is a relative path element", driver.ErrInvalid, name)
	case strings.IndexByte(name, '/') >= 0:
		return fmt.Errorf("%w: lock name %q contains '/': a name is one ZooKeeper path element", driver.ErrInvalid, name)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: lock name %q is not valid UTF-8", driver.ErrInvalid, name)
	}
	for _, r := range name {
		// The characters ZooKeeper refuses in a path (PathUtils.validatePath).
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("%w: lock name %q contains %U, which ZooKeeper does not allow in a path", driver.ErrInvalid, name, r)
		}
	}
	return nil
}

func checkRoot(root string) error {
	if root == "" || root[0] != '/' || root == "/" || root[len(root)-1] == '/' {
		return fmt.Errorf("%w: root %q must be an absolute path below / without a trailing slash", driver.ErrInvalid, root)
	}
	for _, el := range strings.Split(root[1:], "/") {
		if err := checkName(el); err != nil {
			return fmt.Errorf("%w: root %q: element %q is not usable", driver.ErrInvalid, root, el)
		}
	}
	if root == "/zookeeper" || strings.HasPrefix(root, "/zookeeper/") {
		return fmt.Errorf("%w: root %q is inside /zookeeper, which the server reserves", driver.ErrInvalid, root)
	}
	return nil
}

// queue lists the lock nodes in dir, first in line first; a missing dir is an empty queue.
func (b *Backend) queue(ctx context.Context, dir string) ([]entry, error) {
	children, err := b.children(ctx, dir)
	switch {
	case err == zk.ErrNoNode:
		return nil, nil
	case err != nil:
		return nil, classify(err)
	}
	return lineUp(children, false), nil
}

// read returns a lock node's data, or errVanished when it is gone.
func (b *Backend) read(ctx context.Context, path string) (lockData, *zk.Stat, error) {
	raw, stat, err := b.get(ctx, path)
	switch {
	case err == zk.ErrNoNode:
		return lockData{}, nil, errVanished
	case err != nil:
		return lockData{}, nil, classify(err)
	}
	data, err := decodeData(raw)
	if err != nil {
		return lockData{}, nil, fmt.Errorf("%w: %s: %w", driver.ErrInvalid, path, err)
	}
	return data, stat, nil
}
