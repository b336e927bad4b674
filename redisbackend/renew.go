package redisbackend

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// Renew implements driver.Backend. The leases go out as one batch, which a Cluster client
// splits into one round trip per node.
func (b *Backend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	errs := make([]driver.Renewal, len(leases))
	calls := make([]redisconn.Call, 0, len(leases))
	idx := make([]int, 0, len(leases))
	for i, l := range leases {
		if errs[i].Err = b.usable(l.Name); errs[i].Err == nil {
			c := redisconn.Call{Script: renewScript, Keys: []string{b.Key(l.Name)}, Args: []any{l.Owner, b.ttlArg(l.TTL), l.Token, setTTL(l)}}
			if l.Limit > 0 {
				c.Script, c.Keys = semRenewScript, b.semKeys(l.Name)[:2]
			}
			calls = append(calls, c)
			idx = append(idx, i)
		}
	}
	if len(calls) > 0 {
		b.c.EvalBatch(ctx, calls)
	}
	for k, c := range calls {
		errs[idx[k]].Err = renewResult(leases[idx[k]], c.Reply, c.Err)
	}
	return errs
}

// setTTL is renew.lua's ARGV[4] for l: the caller's holds when it sets the TTL, 0 to extend.
func setTTL(l driver.Lease) int {
	if l.Refresh {
		return max(l.Holds, 1)
	}
	return 0
}

func renewResult(l driver.Lease, reply any, err error) error {
	n, err := redisconn.Int64(reply, err)
	switch {
	case err != nil:
		return redislayer.Classify(err)
	case n == 0 && l.Limit > 0:
		return fmt.Errorf("%w: no permit of semaphore %q is held by this owner in Redis", driver.ErrNotHeld, l.Name)
	case n == 0:
		return fmt.Errorf("%w: %q is no longer held by this owner in Redis", driver.ErrNotHeld, l.Name)
	}
	return nil
}
