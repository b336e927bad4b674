package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
)

// session is one lease and the goroutine that keeps it alive, shared by every lock of one TTL.
//
// It sends its own keep-alives (KeepAliveOnce every third of the TTL) rather than using etcd's
// concurrency.Session, because it must know when each keep-alive was sent: the lease lives at
// least until that moment plus the TTL the server answered with, and that is how long the
// Client may trust the locks on it.
type session struct {
	c    *clientv3.Client
	id   clientv3.LeaseID
	ttl  time.Duration
	done chan struct{} // closed when the lease is gone, or no longer known to live

	stop   context.CancelFunc
	exited chan struct{}
	tick   func() // runs after each confirmed keep-alive: the Backend settles what it owes

	mu         sync.Mutex // guards validUntil and ended
	validUntil time.Time  // a lower bound of the lease's expiry, on this process's monotonic clock
	ended      bool
}

// session returns the live session for ttl, granting a lease when there is none.
func (b *Backend) session(ctx context.Context, ttl time.Duration) (*session, error) {
	secs := ttlSeconds(ttl)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: the etcd backend was closed", driver.ErrClosed)
	}
	if s := b.sessions[secs]; s != nil && !s.expired() {
		b.mu.Unlock()
		return s, nil
	}
	b.mu.Unlock()

	// Grant under the caller's context, so that an unreachable cluster does not hold it up.
	sent := time.Now()
	lease, err := b.c.Grant(ctx, int64(secs))
	if err != nil {
		return nil, classify(err)
	}
	s := &session{
		c: b.c, id: lease.ID, ttl: time.Duration(lease.TTL) * time.Second,
		done: make(chan struct{}), exited: make(chan struct{}), tick: b.owed.Kick,
		validUntil: sent.Add(time.Duration(lease.TTL) * time.Second),
	}

	b.mu.Lock()
	if old := b.sessions[secs]; (old != nil && !old.expired()) || b.closed {
		// Another goroutine granted one meanwhile, or the Backend closed: keep one lease. The
		// revoke is the caller's, under its context; a lease it fails to revoke has no keys
		// and expires on its own.
		closed := b.closed
		b.mu.Unlock()
		_, _ = b.c.Revoke(ctx, lease.ID)
		if closed {
			return nil, fmt.Errorf("%w: the etcd backend was closed", driver.ErrClosed)
		}
		return old, nil
	}
	var kctx context.Context
	kctx, s.stop = context.WithCancel(b.ctx)
	b.sessions[secs] = s
	b.mu.Unlock()
	go s.keepAlive(kctx)
	return s, nil
}

func (s *session) keepAlive(ctx context.Context) {
	defer close(s.exited)
	interval := max(s.ttl/3, 100*time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		kctx, cancel := context.WithTimeout(ctx, interval)
		resp, err := s.c.KeepAliveOnce(kctx, s.id)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			s.extend(sent, time.Duration(resp.TTL)*time.Second)
			if s.tick != nil {
				s.tick()
			}
			timer.Reset(interval)
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound), err == nil:
			s.end() // the server says the lease is gone
			return
		default:
			if s.validity(time.Now()) <= 0 {
				s.end() // it may still live, but nothing vouches for it any more
				return
			}
			timer.Reset(min(interval/4, 250*time.Millisecond))
		}
	}
}

func (s *session) extend(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := sent.Add(ttl); u.After(s.validUntil) {
		s.validUntil = u
	}
}

func (s *session) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended = true
		close(s.done)
	}
}

func (s *session) expired() bool {
	select {
	case <-s.done:
		return true
	default:
		return s.validity(time.Now()) <= 0
	}
}

// until is a time before which the lease does not expire.
func (s *session) until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// validity is how long after t the lease is known to live.
func (s *session) validity(t time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil.Sub(t)
}

// halt stops the keep-alive and waits until it has stopped.
func (s *session) halt() {
	if s.stop != nil {
		s.stop()
		<-s.exited
	}
	s.end()
}

// revoke stops the keep-alive and revokes the lease, deleting the keys on it.
func (s *session) revoke() error {
	s.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.c.Revoke(ctx, s.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// leaseUntil returns a time before which lease id does not expire, on this process's
// monotonic clock, for the lock name's messages. For a lease this Backend keeps alive, it is
// what the last keep-alive vouched for. For any other — granted by another Backend (a key
// that a holder with the same owner made there), or one of this Backend's that its
// keep-alives no longer vouch for — it is what etcd reports left of the lease, in whole
// seconds rounded down, counted from when the question was sent: this Backend does not
// extend such a lease, and claims no more of it than is left.
func (b *Backend) leaseUntil(ctx context.Context, name string, id clientv3.LeaseID) (time.Time, error) {
	if id == 0 {
		return time.Time{}, fmt.Errorf("%w: the key of %q has no lease: fencelock did not write it", driver.ErrInvalid, name)
	}
	if s := b.sessionOf(id); s != nil && !s.expired() {
		return s.until(), nil
	}
	asked := time.Now()
	resp, err := b.c.TimeToLive(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound), err == nil && resp.TTL < 0:
		return time.Time{}, fmt.Errorf("%w: the lease of %q expired", driver.ErrNotHeld, name)
	case err != nil:
		return time.Time{}, classify(fmt.Errorf("reading the lease of %q: %w", name, err))
	case resp.TTL == 0:
		return time.Time{}, fmt.Errorf("%w: the lease of %q has less than a second left, and this Backend does not keep it alive", driver.ErrUnavailable, name)
	}
	return asked.Add(time.Duration(resp.TTL) * time.Second), nil
}

// leaseEnded returns a channel closed when lease id is known to be gone: its session's, when
// this Backend keeps it alive; for another's, one that never closes.
func (b *Backend) leaseEnded(id clientv3.LeaseID) <-chan struct{} {
	if s := b.sessionOf(id); s != nil {
		return s.done
	}
	return nil
}

// sessionOf returns the session that owns lease id, if this Backend granted it.
func (b *Backend) sessionOf(id clientv3.LeaseID) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sessions {
		if s.id == id {
			return s
		}
	}
	return nil
}

// dropSession forgets s after its lease was found gone, so that the next acquisition grants
// a new one.
func (b *Backend) dropSession(s *session) {
	b.mu.Lock()
	for k, v := range b.sessions {
		if v == s {
			delete(b.sessions, k)
		}
	}
	b.mu.Unlock()
	s.halt()
}

var errSessionExpired = errors.New("fencelock/etcd: the lease expired while waiting")

// errWaiterLapsed is what a waiter returns when the lease of its key is gone, and the key with
// it: the lock is unavailable to it, not held by another.
var errWaiterLapsed = fmt.Errorf("%w: %w", driver.ErrUnavailable, errSessionExpired)
