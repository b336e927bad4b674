package main

import (
	"context"
	"errors"
	"math"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
)

func init() {
	register(&Entry{
		Library: "redsync", Setting: "defaults: 32 tries, 50-250ms apart",
		Waits: true, Uncontended: true,
		Note: "redsync: one Mutex per acquisition (a Mutex holds one value); TTL 8s by default; its goredis/v9 pool over one go-redis client (defaults) per node",
		New:  func(addrs []string) (Contender, error) { return newRedsync(addrs), nil },
	})
	register(&Entry{
		Library: "redsync", Setting: "WithRetryDelay(1ms), unlimited tries",
		Waits: true,
		New: func(addrs []string) (Contender, error) {
			return newRedsync(addrs, redsync.WithRetryDelay(pollEvery), redsync.WithTries(math.MaxInt32)), nil
		},
	})
	register(&Entry{
		Library: "redsync", Setting: "defaults, 5 nodes",
		Waits: true, Nodes: 5,
		New: func(addrs []string) (Contender, error) { return newRedsync(addrs), nil },
	})
}

type redsyncContender struct {
	rs      *redsync.Redsync
	opts    []redsync.Option
	closers []func() error
}

// redsyncHeld is one pointer, so storing it in a Held costs no allocation.
type redsyncHeld struct{ m *redsync.Mutex }

func newRedsync(addrs []string, opts ...redsync.Option) *redsyncContender {
	c := &redsyncContender{opts: opts}
	pools := make([]redis.Pool, len(addrs))
	for i, a := range addrs {
		rdb := newGoRedis(a)
		pools[i] = goredis.NewPool(rdb)
		c.closers = append(c.closers, rdb.Close)
	}
	c.rs = redsync.New(pools...)
	return c
}

func (c *redsyncContender) Obtain(ctx context.Context, name string) (Held, error) {
	m := c.rs.NewMutex(name, c.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (c *redsyncContender) TryObtain(ctx context.Context, name string) (Held, error) {
	m := c.rs.NewMutex(name, c.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return nil, errors.Join(errHeld, err)
		}
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (h redsyncHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported the lock not held")
	}
	return err
}

func (c *redsyncContender) Close() error {
	var err error
	for _, cl := range c.closers {
		err = errors.Join(err, cl())
	}
	return err
}
