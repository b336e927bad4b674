package redisbackend

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

// Inspect implements driver.Backend.
func (b *Backend) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := b.usable(name); err != nil {
		return driver.Info{}, err
	}
	v, err := redisconn.Slice(b.c.Eval(ctx, inspectScript, []string{b.Key(name), b.fenceKey(name)}))
	if err != nil {
		return driver.Info{}, redislayer.Classify(err)
	}
	info := driver.Info{Name: name}
	if len(v) < 5 {
		return info, fmt.Errorf("%w: unexpected inspect reply %v", driver.ErrUnavailable, v)
	}
	owner, _ := v[0].(string)
	count, _ := v[1].(int64)
	token, _ := v[2].(int64)
	pttl, _ := v[3].(int64)
	info.Held = owner != ""
	info.Owner, info.Count, info.Token = owner, int(count), token
	if pttl > 0 {
		info.Remaining = time.Duration(pttl) * time.Millisecond
	}
	if !info.Held {
		if s, ok := v[4].(string); ok {
			info.Token, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	if len(v) > 5 {
		info.Meta, _ = v[5].(string)
	}
	return info, nil
}
