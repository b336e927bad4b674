//go:build !nogozero

package main

import (
	"context"
	"errors"

	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/core/stores/redis"
)

// go-zero's RedisLock. Build with -tags nogozero to leave it out: importing its redis package
// starts a goroutine (package core/stat) that samples the process's CPU every 250ms, in every
// scenario of the run.
func init() {
	logx.Disable()
	register(&Entry{
		Library: "go-zero", Setting: "defaults: no wait",
		Uncontended: true,
		Note:        "go-zero: core/stores/redis RedisLock; TTL 500ms by default (SetExpire not called); no waiting of its own, so its 1ms setting is the caller's loop; its redis.Redis shares one go-redis client per address within a process, so its contention workers share a connection pool",
		New:         func(addrs []string) (Contender, error) { return newGozero(addrs[0], false) },
	})
	register(&Entry{
		Library: "go-zero", Setting: "caller polls every 1ms",
		Waits: true,
		New:   func(addrs []string) (Contender, error) { return newGozero(addrs[0], true) },
	})
}

type gozeroContender struct {
	store *redis.Redis
	poll  bool
}

type gozeroHeld struct{ l *redis.RedisLock }

func newGozero(addr string, poll bool) (*gozeroContender, error) {
	store, err := redis.NewRedis(redis.RedisConf{Host: addr, Type: redis.NodeType})
	if err != nil {
		return nil, err
	}
	return &gozeroContender{store: store, poll: poll}, nil
}

func (g *gozeroContender) Obtain(ctx context.Context, name string) (Held, error) {
	if !g.poll {
		return nil, errNoWait
	}
	return pollObtain(ctx, name, g.TryObtain)
}

func (g *gozeroContender) TryObtain(ctx context.Context, name string) (Held, error) {
	l := redis.NewRedisLock(g.store, name)
	ok, err := l.AcquireCtx(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errHeld
	}
	return gozeroHeld{l}, nil
}

func (h gozeroHeld) Release(ctx context.Context) error {
	ok, err := h.l.ReleaseCtx(ctx)
	if err == nil && !ok {
		err = errors.New("go-zero: release reported the lock not held")
	}
	return err
}

// Close does nothing: go-zero keeps its clients in a process-wide cache with no way to close
// them.
func (g *gozeroContender) Close() error { return nil }
