package main

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock"
	"github.com/redis/rueidis"

	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisconn/rueidisconn"
)

func init() {
	register(&Entry{
		Library: "fencelock", Setting: "defaults: wake on release",
		Waits: true, Uncontended: true,
		Note: "fencelock: redisbackend on one go-redis client (defaults), TTL 30s, watchdog, fencing token and reentrancy as a user gets them",
		New: func(addrs []string) (Contender, error) {
			rdb := newGoRedis(addrs[0])
			return &fencelockContender{locker: fencelock.New(redisbackend.New(rdb)), closers: []func() error{rdb.Close}}, nil
		},
	})
	register(&Entry{
		Library: "fencelock", Setting: "WithPipelining(0)",
		Uncontended: true,
		Note:        "fencelock (WithPipelining(0)): every call sent on its own, the default before December 2026; by default calls beyond 8 in flight go out together as one pipeline",
		New: func(addrs []string) (Contender, error) {
			rdb := newGoRedis(addrs[0])
			return &fencelockContender{locker: fencelock.New(redisbackend.New(rdb, redisbackend.WithPipelining(0))), closers: []func() error{rdb.Close}}, nil
		},
	})
	register(&Entry{
		Library: "fencelock", Setting: rueidisSetting,
		Waits: true, Uncontended: true,
		Note: "fencelock (rueidis adapter): redisbackend on rueidisconn over one rueidis client (its defaults: auto-pipelining, client-side caching)",
		New: func(addrs []string) (Contender, error) {
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addrs[0]}})
			if err != nil {
				return nil, err
			}
			closeClient := func() error { client.Close(); return nil }
			return &fencelockContender{locker: fencelock.New(redisbackend.New(rueidisconn.New(client))), closers: []func() error{closeClient}}, nil
		},
	})
	register(&Entry{
		Library: "fencelock", Setting: "WithRetry(LinearBackoff(1ms))",
		Waits: true,
		New: func(addrs []string) (Contender, error) {
			rdb := newGoRedis(addrs[0])
			return &fencelockContender{
				locker:  fencelock.New(redisbackend.New(rdb)),
				opts:    []fencelock.Option{fencelock.WithRetry(fencelock.LinearBackoff(pollEvery))},
				closers: []func() error{rdb.Close},
			}, nil
		},
	})
}

// rueidisSetting names the entry of fencelock on the rueidis adapter.
const rueidisSetting = "rueidis adapter"

// fencelockContender is a fencelock.Client over any backend.
type fencelockContender struct {
	locker  *fencelock.Client
	opts    []fencelock.Option
	closers []func() error // what the backend is built on, closed after the client
}

func (f *fencelockContender) Obtain(ctx context.Context, name string) (Held, error) {
	l, err := f.locker.Obtain(ctx, name, f.opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (f *fencelockContender) TryObtain(ctx context.Context, name string) (Held, error) {
	l, err := f.locker.TryObtain(ctx, name, f.opts...)
	if err != nil {
		if errors.Is(err, fencelock.ErrNotObtained) {
			return nil, errors.Join(errHeld, err)
		}
		return nil, err
	}
	return l, nil
}

func (f *fencelockContender) Close() error {
	err := f.locker.Close()
	for _, c := range f.closers {
		err = errors.Join(err, c())
	}
	return err
}
