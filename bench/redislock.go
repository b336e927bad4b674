package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
)

func init() {
	register(&Entry{
		Library: "bsm/redislock", Setting: "defaults: no retry",
		Uncontended: true,
		Note:        "bsm/redislock: TTL 30s (it has no default); by default Obtain makes one attempt, so only its 1ms retry setting waits",
		New:         func(addrs []string) (Contender, error) { return newBSM(addrs[0], nil), nil },
	})
	register(&Entry{
		Library: "bsm/redislock", Setting: "LinearBackoff(1ms)",
		Waits: true,
		New: func(addrs []string) (Contender, error) {
			return newBSM(addrs[0], &redislock.Options{RetryStrategy: redislock.LinearBackoff(pollEvery)}), nil
		},
	})
}

type bsmContender struct {
	close  func() error
	client *redislock.Client
	opt    *redislock.Options
}

func newBSM(addr string, opt *redislock.Options) *bsmContender {
	rdb := newGoRedis(addr)
	return &bsmContender{close: rdb.Close, client: redislock.New(rdb), opt: opt}
}

func (b *bsmContender) Obtain(ctx context.Context, name string) (Held, error) {
	if b.opt == nil {
		return nil, errNoWait
	}
	return b.obtain(ctx, name, b.opt)
}

func (b *bsmContender) TryObtain(ctx context.Context, name string) (Held, error) {
	return b.obtain(ctx, name, nil)
}

func (b *bsmContender) obtain(ctx context.Context, name string, opt *redislock.Options) (Held, error) {
	l, err := b.client.Obtain(ctx, name, 30*time.Second, opt)
	if err != nil {
		if errors.Is(err, redislock.ErrNotObtained) {
			return nil, errors.Join(errHeld, err)
		}
		return nil, err
	}
	return l, nil
}

func (b *bsmContender) Close() error { return b.close() }
