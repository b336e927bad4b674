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
	keys := b.queueKeys(req.Name)[:3:3] // the lock, its fence counter and its line; shared, so capped
	args := trimmed(req.Owner, b.ttlArg(req.TTL), req.Hold, req.Meta)
	res, acked, err := b.take(ctx, b.cycle.acquire, keys, args)
	if err != nil {
		return driver.Grant{}, err
	}
	if res[0] == 0 {
		return driver.Grant{}, &driver.HeldError{Name: req.Name, Remaining: time.Duration(res[1]) * time.Millisecond}
	}
	if err := b.unacked(acked, "lock"); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: res[1], Count: int(res[2])}, nil
}

// take runs an acquisition script — with WAIT in the same round trip under WithReplicas — and
// returns its reply's integers, up to three: the outcome first, then at least one more, and a
// count after the token when the outcome is 1. A reply of one integer, a token, is a grant of
// one hold (acquire.lua): {1, token, 1}. acked is how many replicas acknowledged the script's
// writes, -1 without WithReplicas.
func (b *Backend) take(ctx context.Context, script *redisconn.Script, keys []string, args []any) (res [3]int64, acked int, err error) {
	var v any
	acked = -1
	if b.replicas > 0 {
		v, acked, err = b.replicated(ctx, script, keys, args)
	} else {
		v, err = b.pipe.run(ctx, script, keys, args...)
	}
	if err != nil {
		return res, acked, failed(err)
	}
	if token, ok := v.(int64); ok && token > 0 {
		return [3]int64{1, token, 1}, acked, nil
	}
	reply, _ := v.([]any)
	res, ok := int64s(reply)
	if !ok || len(reply) < 2 || (res[0] == 1 && len(reply) < 3) {
		return res, acked, fmt.Errorf("%w: unexpected acquisition reply %v", driver.ErrUnavailable, v)
	}
	return res, acked, nil
}

// unacked is the error of a grant that fewer replicas acknowledged than WithReplicas asks for
// (acked of them; -1 without WithReplicas); what names what was granted. Such a grant is not
// handed out: the Client releases it, as after any acquisition that failed but may have taken
// the lock.
func (b *Backend) unacked(acked int, what string) error {
	if acked < 0 || acked >= b.replicas {
		return nil
	}
	return fmt.Errorf("%w: only %d of %d replicas acknowledged the %s within %v", driver.ErrUnavailable, acked, b.replicas, what, b.replicaTO)
}

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
