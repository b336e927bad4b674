package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/driver"
)

var (
	// ErrValidityExpired means a majority granted (or renewed) the lock, but so late that no
	// validity was left: the TTL minus the time since the first request was sent, minus the
	// clock-drift allowance, was not positive. A failed acquisition is released again on every
	// node. It matches driver.ErrUnavailable, not driver.ErrNotObtained: nobody else
	// holds the lock, the nodes were too slow, and an attempt a moment later may succeed.
	ErrValidityExpired = fmt.Errorf("%w: redlock: the lock's validity ran out before a majority confirmed it", driver.ErrUnavailable)

	// ErrNodeTimeout is the error of a node that did not answer within the node timeout
	// (WithNodeTimeout). It matches driver.ErrUnavailable, and deliberately not
	// context.DeadlineExceeded: the caller's context did not end.
	ErrNodeTimeout = fmt.Errorf("%w: redlock: no answer within the node timeout", driver.ErrUnavailable)

	// errUnsettled: a majority keeps the lock for one owner under tokens that differ, for
	// longer than an acquisition takes to settle its token (see Backend.Inspect): a fault cut
	// its token writes short.
	errUnsettled = fmt.Errorf("%w: redlock: the lock's token is not settled", driver.ErrUnavailable)

	errUnidentified = fmt.Errorf("%w: redlock: the node has not yet told its run_id, so its answer cannot count towards the majority: it might be another node's server", driver.ErrUnavailable)

	errClosed = fmt.Errorf("%w: the redlock backend was closed", driver.ErrClosed)
)

// NodeError is the failure of one node in a quorum operation.
type NodeError struct {
	Node int    // index of the node in the clients given to New
	Addr string // the node's address as its client knows it
	Err  error  // matches driver.ErrUnavailable for a network error or timeout
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: node %d (%s): %v", e.Node, e.Addr, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError means an operation did not reach a majority of nodes because too many of them
// failed. It matches driver.ErrUnavailable, and unwraps to the failures of the nodes, so
// errors.As(err, &nodeErr) finds the first one.
type QuorumError struct {
	Op      string // "acquire", "token", "renew", "release", "inspect"
	Name    string // the lock name
	Granted int    // nodes that agreed
	Needed  int    // the majority: N/2+1
	Nodes   []*NodeError
}

func (e *QuorumError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v: redlock: %s %q: %d of %d nodes needed agreed", driver.ErrUnavailable, e.Op, e.Name, e.Granted, e.Needed)
	for i, n := range e.Nodes {
		if i == 0 {
			sb.WriteString("; ")
		} else {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "node %d (%s): %v", n.Node, n.Addr, n.Err)
	}
	return sb.String()
}

// Is reports whether target is driver.ErrUnavailable.
func (e *QuorumError) Is(target error) bool { return target == driver.ErrUnavailable }

// Unwrap returns the node errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Nodes))
	for i, n := range e.Nodes {
		errs[i] = n
	}
	return errs
}

func isClassified(err error) bool {
	return errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrNotHeld)
}

// ctxErr is the error of an operation whose context ended: it matches ctx.Err().
func ctxErr(op, name string, err error) error {
	return fmt.Errorf("redlock: %s %q: %w", op, name, err)
}
