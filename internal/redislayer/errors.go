package redislayer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisconn"
)

// transient are the Redis error replies that may pass: a failover, a reshard, a restart.
var transient = []string{"READONLY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "MOVED", "ASK", "BUSY", "NOREPLICAS"}

// Classify wraps err with the fencelock error that says what to do about it: an error reply
// that may pass, or any failure to reach the server, matches ErrUnavailable; a refusal that
// will not pass by itself (another type under the lock's key, a script error of fencelock's
// own, an unknown command) matches ErrInvalid.
func Classify(err error) error {
	se, ok := errors.AsType[*redisconn.ServerError](err)
	if !ok {
		return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
	}
	for _, p := range transient {
		if strings.HasPrefix(se.Msg, p) {
			if p == "READONLY" {
				return fmt.Errorf("%w: the server is a read-only replica: %w", fencelock.ErrUnavailable, err)
			}
			return fmt.Errorf("%w: %w", fencelock.ErrUnavailable, err)
		}
	}
	switch {
	case strings.Contains(se.Msg, "WRONGTYPE"):
		return fmt.Errorf("%w: the lock's key holds another Redis type: %w", fencelock.ErrInvalid, err)
	case strings.Contains(se.Msg, "FENCELOCK"):
		return fmt.Errorf("%w: %w", fencelock.ErrInvalid, err)
	}
	return fmt.Errorf("%w: Redis refused: %w", fencelock.ErrInvalid, err)
}
