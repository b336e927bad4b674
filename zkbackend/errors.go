package zkbackend

import (
	"errors"
	"fmt"
	"net"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// errVanished says a lock node was deleted between two calls: released, dropped, or gone with
// its session. Callers look at the queue again; it never leaves the package.
var errVanished = errors.New("fencelock/zk: lock node vanished")

// classify wraps a go-zookeeper error with the fencelock error that says what to do about it.
func classify(err error) error {
	switch {
	case err == nil, errors.Is(err, driver.ErrInvalid), errors.Is(err, driver.ErrUnavailable):
		return err
	case transient(err):
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	switch err {
	case zk.ErrBadArguments, zk.ErrInvalidPath, zk.ErrInvalidACL, zk.ErrInvalidFlags:
		return fmt.Errorf("%w: ZooKeeper refused the request: %w", driver.ErrInvalid, err)
	case zk.ErrNoAuth, zk.ErrAuthFailed:
		return fmt.Errorf("%w: not permitted by the nodes' ACL: %w", driver.ErrInvalid, err)
	case zk.ErrNoChildrenForEphemerals:
		return fmt.Errorf("%w: the root or the lock's node is ephemeral, so it cannot hold lock nodes: %w", driver.ErrInvalid, err)
	}
	return fmt.Errorf("fencelock/zk: %w", err)
}

// transient reports whether err may pass: the connection or the session went away.
func transient(err error) bool {
	switch err {
	case zk.ErrNoServer, zk.ErrConnectionClosed, zk.ErrSessionExpired, zk.ErrClosing, zk.ErrSessionMoved, zk.ErrNothing:
		return true
	}
	if errors.Is(err, net.ErrClosed) {
		return true // a request written as the connection went down
	}
	var ne net.Error
	var op *net.OpError
	return (errors.As(err, &ne) && ne.Timeout()) || errors.As(err, &op)
}

// ambiguous reports whether a create that failed with err may have made its node anyway: the
// request was sent, and the connection closed before the reply came.
func ambiguous(err error) bool {
	return err == zk.ErrConnectionClosed || err == zk.ErrNoServer
}
