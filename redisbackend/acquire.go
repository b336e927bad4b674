package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// Acquire implements driver.Backend.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := b.usable(req.Name); err != nil {
		return driver.Grant{}, err
	}
	if req.Limit > 0 {
		g, _, err := b.permitAttempt(ctx, req, 0, 0, nil)
		return g, err
	}
	keys := b.queueKeys(req.Name)[:3] // the lock, its fence counter and its line
	args := []any{req.Owner, req.Hold, b.ttlArg(req.TTL), b.retentionArg, req.Meta}
	var reply []any
	var err error
	acked := -1
	if b.replicas > 0 {
		var v any
		if v, acked, err = b.replicated(ctx, acquireScript, keys, args); err == nil {
			reply, _ = v.([]any)
		}
	} else {
		reply, err = redisconn.Slice(b.pipe.run(ctx, acquireScript, keys, args...))
	}
	if err != nil {
		return driver.Grant{}, failed(err)
	}
	res, ok := int64s(reply)
	if !ok || len(reply) < 2 || (res[0] == 1 && len(reply) < 3) {
		return driver.Grant{}, fmt.Errorf("%w: unexpected acquire reply %v", driver.ErrUnavailable, reply)
	}
	if res[0] == 0 {
		return driver.Grant{}, &driver.HeldError{Name: req.Name, Remaining: time.Duration(res[1]) * time.Millisecond}
	}
	if acked >= 0 && acked < b.replicas {
		// Not handed out; the Client releases it, as after any acquisition that failed but may
		// have taken the lock.
		return driver.Grant{}, fmt.Errorf("%w: only %d of %d replicas acknowledged the lock within %v", driver.ErrUnavailable, acked, b.replicas, b.replicaTO)
	}
	return driver.Grant{Token: res[1], Count: int(res[2])}, nil
}

// replicated runs script and WAIT on one connection, in one round trip: WAIT counts the

// replicated runs script and WAIT on one connection, in one round trip: WAIT counts the
// replicas that have the writes of its own connection.
func (b *Backend) replicated(ctx context.Context, script *redisconn.Script, keys []string, args []any) (any, int, error) {
	return b.c.EvalWait(ctx, script, keys, args, b.replicas, b.replicaTO)
}

// failed classifies the error of an acquisition. A WAIT that the server refused (a writable
// replica refuses it) is a configuration the caller must change, so the error matches
// driver.ErrInvalid; the script ran before it, so the error is marked driver.MayHold, and the
// Client undoes what the script may have taken.
func failed(err error) error {
	if werr, ok := errors.AsType[*redisconn.WaitError](err); ok {
		if _, refused := errors.AsType[*redisconn.ServerError](err); refused {
			return driver.MayHold(fmt.Errorf("%w: WithReplicas: the server refused %w", driver.ErrInvalid, werr))
		}
	}
	return redislayer.Classify(err)
}
