package zkbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// Backend is a fencelock.Backend and fencelock.Queue over one ZooKeeper session. It is safe for
// concurrent use and starts no goroutines of its own.
type Backend struct {
	conn     *zk.Conn
	root     string
	acl      []zk.ACL
	validity time.Duration // the session timeout
	err      error         // set when the configuration is unusable; every call returns it

	mu      sync.Mutex          // guards held and orphans
	held    map[holder]*holding // lock nodes that hold a lock for an owner, as last seen
	orphans []orphan            // nodes whose removal is still owed; see orphan.go
}

var (
	_ fencelock.Backend = (*Backend)(nil)
	_ fencelock.Queue   = (*Backend)(nil)
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
// gives a Backend whose every call fails with an error matching fencelock.ErrInvalid.
func New(conn *zk.Conn, opts ...Option) *Backend {
	b := &Backend{
		conn: conn,
		root: "/fencelock",
		acl:  zk.WorldACL(zk.PermAll),
		held: make(map[holder]*holding),
	}
	for _, o := range opts {
		o(b)
	}
	switch {
	case conn == nil:
		b.err = fmt.Errorf("%w: nil *zk.Conn", fencelock.ErrInvalid)
	case b.validity <= 0:
		b.err = fmt.Errorf("%w: session timeout not set: pass WithSessionTimeout with the timeout given to zk.Connect (go-zookeeper does not expose the negotiated one)", fencelock.ErrInvalid)
	case len(b.acl) == 0:
		b.err = fmt.Errorf("%w: empty ACL", fencelock.ErrInvalid)
	default:
		if err := checkRoot(b.root); err != nil {
			b.err = err
		}
	}
	return b
}

// Path returns the node of the lock name: its directory, whose children are the queue of
// contenders, the first of which holds the lock.
func (b *Backend) Path(name string) string { return b.root + "/" + name }

// usable reports why name cannot be locked with b.
func (b *Backend) usable(ctx context.Context, name string) error {
	if b == nil {
		return fmt.Errorf("%w: nil Backend", fencelock.ErrInvalid)
	}
	if b.err != nil {
		return b.err
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", fencelock.ErrInvalid)
	}
	if err := checkName(name); err != nil {
		return err
	}
	return ctx.Err()
}

// checkName accepts a lock name that is exactly one path element. A '/' would nest one lock's
// directory inside another's, where the inner lock's nodes would pass for the outer lock's
// waiters (go-zookeeper's zk.Lock has that bug).
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lock name", fencelock.ErrInvalid)
	case name == "." || name == "..":
		return fmt.Errorf("%w: lock name %q is a relative path element", fencelock.ErrInvalid, name)
	case strings.IndexByte(name, '/') >= 0:
		return fmt.Errorf("%w: lock name %q contains '/': a name is one ZooKeeper path element", fencelock.ErrInvalid, name)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: lock name %q is not valid UTF-8", fencelock.ErrInvalid, name)
	}
	for _, r := range name {
		// The characters ZooKeeper refuses in a path (PathUtils.validatePath).
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("%w: lock name %q contains %U, which ZooKeeper does not allow in a path", fencelock.ErrInvalid, name, r)
		}
	}
	return nil
}

func checkRoot(root string) error {
	if root == "" || root[0] != '/' || root == "/" || root[len(root)-1] == '/' {
		return fmt.Errorf("%w: root %q must be an absolute path below / without a trailing slash", fencelock.ErrInvalid, root)
	}
	for _, el := range strings.Split(root[1:], "/") {
		if err := checkName(el); err != nil {
			return fmt.Errorf("%w: root %q: element %q is not usable", fencelock.ErrInvalid, root, el)
		}
	}
	if root == "/zookeeper" || strings.HasPrefix(root, "/zookeeper/") {
		return fmt.Errorf("%w: root %q is inside /zookeeper, which the server reserves", fencelock.ErrInvalid, root)
	}
	return nil
}

// Inspect implements fencelock.Backend. The holder is the first node in line; Remaining is
// zero, since a lock lasts as long as its holder's session, which no one but the server knows.
func (b *Backend) Inspect(ctx context.Context, name string) (fencelock.Info, error) {
	if err := b.usable(ctx, name); err != nil {
		return fencelock.Info{}, err
	}
	info := fencelock.Info{Name: name}
	for range lookTries {
		q, err := b.queue(b.Path(name))
		if err != nil || len(q) == 0 {
			return info, err
		}
		data, stat, err := b.read(b.Path(name) + "/" + q[0].name)
		if err == errVanished {
			continue // released meanwhile: look again
		}
		if err != nil {
			return info, err
		}
		info.Held, info.Owner, info.Count, info.Token, info.Meta = true, data.owner, data.count(), stat.Czxid, data.meta
		return info, nil
	}
	return info, fmt.Errorf("%w: %q changed hands %d times while being inspected", fencelock.ErrUnavailable, name, lookTries)
}

// queue lists the lock nodes in dir, first in line first; a missing dir is an empty queue.
func (b *Backend) queue(dir string) ([]entry, error) {
	children, _, err := b.conn.Children(dir)
	switch {
	case err == zk.ErrNoNode:
		return nil, nil
	case err != nil:
		return nil, classify(err)
	}
	return lineUp(children), nil
}

// read returns a lock node's data, or errVanished when it is gone.
func (b *Backend) read(path string) (lockData, *zk.Stat, error) {
	raw, stat, err := b.conn.Get(path)
	switch {
	case err == zk.ErrNoNode:
		return lockData{}, nil, errVanished
	case err != nil:
		return lockData{}, nil, classify(err)
	}
	data, err := decodeData(raw)
	if err != nil {
		return lockData{}, nil, fmt.Errorf("%w: %s: %w", fencelock.ErrInvalid, path, err)
	}
	return data, stat, nil
}
