package main

import (
	"context"
	"errors"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

func init() {
	register(&Entry{
		Library: "rueidislock", Setting: "defaults: KeyMajority 2",
		Waits: true, Uncontended: true,
		Note: "rueidislock: its own rueidis client (auto-pipelining, client-side caching for wake-ups); KeyValidity 5s; by default a lock is 2 of 3 keys on the one server",
		New:  func(addrs []string) (Contender, error) { return newRueidislock(addrs[0], 0) },
	})
	register(&Entry{
		Library: "rueidislock", Setting: "KeyMajority 1",
		Waits: true, Uncontended: true,
		New: func(addrs []string) (Contender, error) { return newRueidislock(addrs[0], 1) },
	})
}

type rueidislockContender struct{ locker rueidislock.Locker }

// rueidisHeld is the lock's cancel function, which releases it and waits until its keys are
// deleted.
type rueidisHeld context.CancelFunc

func (h rueidisHeld) Release(context.Context) error {
	h()
	return nil
}

func newRueidislock(addr string, majority int32) (*rueidislockContender, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  majority,
	})
	if err != nil {
		return nil, err
	}
	return &rueidislockContender{locker: l}, nil
}

func (r *rueidislockContender) Obtain(ctx context.Context, name string) (Held, error) {
	_, cancel, err := r.locker.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return rueidisHeld(cancel), nil
}

func (r *rueidislockContender) TryObtain(ctx context.Context, name string) (Held, error) {
	_, cancel, err := r.locker.TryWithContext(ctx, name)
	if err != nil {
		if errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, errors.Join(errHeld, err)
		}
		return nil, err
	}
	return rueidisHeld(cancel), nil
}

func (r *rueidislockContender) Close() error {
	r.locker.Close()
	return nil
}
