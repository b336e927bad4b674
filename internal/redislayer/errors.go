package redislayer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisconn"
)

// transient are the Redis error replies that may pass: a failover, a reshard, a restart.
var transient = []string{"READONLY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "MOVED", "ASK", "BUSY", "NOREPLICAS", "OOM"}

// Classify wraps err with the fencelock error that says what to do about it: an error reply
// that may pass, or any failure to reach the server, matches ErrUnavailable; a refusal that
// will not pass by itself (another type under the lock's key, a script error of fencelock's
// own, an unknown command) matches ErrInvalid.
func Classify(err error) error {
	se, ok := errors.AsType[*redisconn.ServerError](err)
	if !ok {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	r := &reply{msg: scriptSuffix.ReplaceAllString(se.Msg, ""), err: err}
	for _, p := range transient {
		if strings.HasPrefix(se.Msg, p) {
			switch p {
			case "READONLY":
				return fmt.Errorf("%w: the server is a read-only replica: %w", driver.ErrUnavailable, r)
			case "OOM":
				// Under noeviction (the policy fencelock wants) a full server refuses writes
				// until memory is freed: that passes, as a failover does.
				return fmt.Errorf("%w: the server is out of memory (maxmemory): %w", driver.ErrUnavailable, r)
			}
			return fmt.Errorf("%w: %w", driver.ErrUnavailable, r)
		}
	}
	switch {
	case strings.Contains(se.Msg, "WRONGTYPE"):
		return fmt.Errorf("%w: a key of the lock holds another Redis type (%w): delete it, or give the Backend a key prefix of its own (WithPrefix)", driver.ErrInvalid, r)
	case strings.Contains(se.Msg, "FENCELOCK"):
		r.msg = strings.TrimSpace(strings.TrimPrefix(r.msg[strings.Index(r.msg, "FENCELOCK"):], "FENCELOCK"))
		return fmt.Errorf("%w: %w: delete it, or give the Backend a key prefix of its own (WithPrefix)", driver.ErrInvalid, r)
	}
	return fmt.Errorf("%w: Redis refused: %w", driver.ErrInvalid, r)
}

// scriptSuffix is what Redis appends to an error raised inside a script: its SHA and line,
// which say nothing to the reader of a message.
var scriptSuffix = regexp.MustCompile(`\s*script: [0-9a-f]{40}, on @user_script:\d+\.?$`)

// reply is a server's error reply as a message shows it, without scriptSuffix or the
// FENCELOCK tag of fencelock's own script errors; it unwraps to the reply itself.
type reply struct {
	msg string
	err error
}

func (r *reply) Error() string { return r.msg }
func (r *reply) Unwrap() error { return r.err }
