package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencelock/fencelock"
)

// session is one lease and its keep-alive, shared by every lock of one TTL.
type session struct {
	s *concurrency.Session

	mu         sync.Mutex // guards validUntil
	validUntil time.Time  // a lower bound of the lease's expiry, on this process's monotonic clock
}

// session returns the live session for ttl, granting a lease when there is none.
func (b *Backend) session(ctx context.Context, ttl time.Duration) (*session, error) {
	secs := ttlSeconds(ttl)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: backend closed", fencelock.ErrUnavailable)
	}
	if s := b.sessions[secs]; s != nil && !s.expired() {
		b.mu.Unlock()
		return s, nil
	}
	b.mu.Unlock()

	// Grant under the caller's context, so that an unreachable cluster does not hold it up;
	// the keep-alive then runs under the Backend's.
	sent := time.Now()
	lease, err := b.c.Grant(ctx, int64(secs))
	if err != nil {
		return nil, classify(err)
	}
	cs, err := concurrency.NewSession(b.c, concurrency.WithLease(lease.ID), concurrency.WithTTL(secs), concurrency.WithContext(b.ctx))
	if err != nil {
		_, _ = b.c.Revoke(context.WithoutCancel(ctx), lease.ID)
		return nil, classify(err)
	}
	s := &session{s: cs, validUntil: sent.Add(time.Duration(lease.TTL) * time.Second)}

	b.mu.Lock()
	if old := b.sessions[secs]; old != nil && !old.expired() || b.closed {
		// Another goroutine granted one meanwhile, or the Backend closed: keep one lease.
		b.mu.Unlock()
		_ = cs.Close()
		if b.closed {
			return nil, fmt.Errorf("%w: backend closed", fencelock.ErrUnavailable)
		}
		return old, nil
	}
	b.sessions[secs] = s
	b.mu.Unlock()
	return s, nil
}

func (s *session) expired() bool {
	select {
	case <-s.s.Done():
		return true
	default:
		return false
	}
}

// validity is how long after sent the lease is known to live.
func (s *session) validity(sent time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil.Sub(sent)
}

// confirm asks the cluster how long the lease has left and records it. It fails with
// ErrNotHeld when the lease is gone.
func (s *session) confirm(ctx context.Context, c *clientv3.Client) (time.Duration, error) {
	sent := time.Now()
	resp, err := c.TimeToLive(ctx, s.s.Lease())
	if err != nil {
		return 0, classify(err)
	}
	if resp.TTL <= 0 {
		return 0, fmt.Errorf("%w: lease %x expired", fencelock.ErrNotHeld, s.s.Lease())
	}
	v := time.Duration(resp.TTL) * time.Second
	s.mu.Lock()
	if u := sent.Add(v); u.After(s.validUntil) {
		s.validUntil = u
	}
	s.mu.Unlock()
	return v, nil
}

// sessionOf returns the live session that owns lease id.
func (b *Backend) sessionOf(id clientv3.LeaseID) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sessions {
		if s.s.Lease() == id {
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
	s.s.Orphan()
}

var errSessionExpired = errors.New("fencelock/etcd: the lease expired while waiting")
