package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
)

// firstAttemptTimeout bounds run's first attempt at the lock, apart from --wait: a backend
// that accepts the connection and never answers must not hold a cron job forever.
const firstAttemptTimeout = 10 * time.Second

// signalled is the cause of a wait that a signal ended.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return s.sig.String() + " received" }

// obtainForRun gets the lock for run, or the exit that says why not. The first attempt is one
// try, whatever --wait says: a positive --wait bounds the wait that follows when the lock is
// held elsewhere or the backend refuses, not the round trip of a lock that is free. A signal
// from sigs ends the wait.
func obtainForRun(ctx context.Context, st *store, locker *fencelock.Client, f *runFlags, name, command string, sigs <-chan os.Signal) (*fencelock.Lock, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			cancel(signalled{s.(syscall.Signal)})
		case <-stop:
		}
	}()
	lock, err := obtainOnce(ctx, st, locker, f, name, command)
	close(stop)
	<-watched
	var sig signalled
	if errors.As(context.Cause(ctx), &sig) {
		if lock != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			_ = lock.Release(rctx)
		}
		return nil, &exitError{code: 128 + int(sig.sig), err: fmt.Errorf("%v while waiting for lock %q; the command was not started", sig.sig, name)}
	}
	return lock, err
}

func obtainOnce(ctx context.Context, st *store, locker *fencelock.Client, f *runFlags, name, command string) (*fencelock.Lock, error) {
	if err := st.ping(ctx); err != nil && !f.again {
		return nil, err // a daemon waiting again waits through an outage, as Obtain does
	}
	opts := []fencelock.Option{fencelock.WithTTL(f.ttl), fencelock.WithMetadata(holderMeta(command)), fencelock.WithMaxHold(f.maxHold), fencelock.WithMinHold(f.minHold), fencelock.WithLockDelay(f.lockDelay)}
	try, wait := locker.TryObtain, locker.Obtain
	if f.permits > 0 {
		sem := locker.Semaphore(name, f.permits)
		try = func(ctx context.Context, _ string, opts ...fencelock.Option) (*fencelock.Lock, error) {
			return sem.TryAcquire(ctx, opts...)
		}
		wait = func(ctx context.Context, _ string, opts ...fencelock.Option) (*fencelock.Lock, error) {
			return sem.Acquire(ctx, opts...)
		}
	}
	actx, cancel := context.WithTimeout(ctx, firstAttemptTimeout)
	lock, first := try(actx, name, opts...)
	cancel()
	if first == nil {
		return lock, nil
	}
	if f.wait == 0 || errors.Is(first, fencelock.ErrInvalid) || errors.Is(first, fencelock.ErrClosed) || ctx.Err() != nil {
		return nil, notObtainedExit(ctx, locker, f, name, first, first)
	}
	wctx := ctx
	if f.wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, f.wait)
		defer cancel()
	}
	lock, err := wait(wctx, name, opts...)
	if err == nil {
		return lock, nil
	}
	return nil, notObtainedExit(ctx, locker, f, name, first, err)
}

// notObtainedExit is the exit for a lock not obtained: the conflict code only when the lock is
// held elsewhere, as the backend said or says now; otherwise the failure that kept run from it.
// first is the first attempt's error, last the one that ended the wait.
func notObtainedExit(ctx context.Context, locker *fencelock.Client, f *runFlags, name string, first, last error) error {
	if ctx.Err() != nil {
		return last // ended by a signal: the caller gives the exit
	}
	var held *fencelock.HeldError
	var left time.Duration // what the holder's TTL has left, when known
	switch {
	case errors.As(last, &held):
		left = held.Remaining
	case errors.Is(last, fencelock.ErrInvalid):
		return &exitError{code: exitUsage, err: last}
	case f.wait != 0 && errors.Is(last, context.DeadlineExceeded) && heldNow(ctx, locker, f, name, &left):
		// A queued wait that ran out says only that; ask who holds the lock.
	default:
		// Not held elsewhere: the backend refused, failed or did not answer. The first
		// attempt's error names the cause when the wait's last one is only a deadline.
		cause := last
		if errors.Is(last, context.DeadlineExceeded) && !errors.As(first, &held) {
			cause = first
		}
		if f.wait != 0 && errors.Is(last, context.DeadlineExceeded) {
			return exitf(exitFailure, "lock %q not obtained within --wait %v, and not held elsewhere: %v", name, f.wait, cause)
		}
		return exitf(exitFailure, "lock %q not obtained: %v", name, cause)
	}
	ttl, what, it := "", fmt.Sprintf("lock %q is", name), "it"
	if left > 0 {
		ttl = fmt.Sprintf("; the holder's TTL has %v left", left.Round(time.Millisecond))
	}
	if f.permits > 0 {
		what, it = fmt.Sprintf("all %d permits of %q are", f.permits, name), "one"
		if left > 0 {
			ttl = fmt.Sprintf("; the first to expire has %v left", left.Round(time.Millisecond))
		}
	}
	if f.wait > 0 {
		return &exitError{code: f.conflictCode, err: fmt.Errorf("%s held elsewhere: waited %v for %s%s", what, f.wait, it, ttl)}
	}
	return &exitError{code: f.conflictCode, err: fmt.Errorf("%s held elsewhere%s; --wait DURATION waits for it", what, ttl)}
}

// heldNow reports whether the backend says name is held now (every permit, for a semaphore),
// and sets left to what the holder's TTL has left (the first permit's to expire).
func heldNow(ctx context.Context, locker *fencelock.Client, f *runFlags, name string, left *time.Duration) bool {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if f.permits > 0 {
		info, err := locker.Semaphore(name, f.permits).Inspect(ictx)
		if err != nil || len(info.Permits) < f.permits {
			return false
		}
		*left = info.Permits[0].Remaining
		return true
	}
	info, err := locker.Inspect(ictx, name)
	if err == nil && info.Held {
		*left = info.Remaining
		return true
	}
	return false
}
