package memorybackend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// Backend is a driver.Backend on a Store: what one Client uses. It implements every optional
// interface of the contract: a Queue (a fair line with hand-over), Semaphores, a ReleaseWatcher,
// a LossWatcher (a lock that ends other than by its holder's release is pushed to the holder
// at once), Namer, SemaphoreNamer and ForceReleaser. It is safe for concurrent use.
//
// Locking: mu guards the faults. It is never held while a call waits or the Store's mu is
// taken.
type Backend struct {
	s      *Store
	id     int // the Store's count of Backends when it was made: the gate's order
	closed chan struct{}
	// now is the clock of the Backend's process, when it is not the store's: the simulation
	// gives its Clients clocks that drift, and a Backend measures its calls on its own.
	now  func() time.Time
	once sync.Once

	mu         sync.Mutex
	faults     []fault   // what the next calls meet, first first
	partition  time.Time // calls sent before it reach the store only then
	partitions int       // Partition calls, so that a later one can end an earlier one early
}

// fault is what one call meets.
type fault struct {
	drop    bool // its reply is lost
	applied bool // with drop: it was applied first
	delay   time.Duration
}

// DropNextReply makes the Backend's next call fail as if its reply were lost on the way: the
// caller gets an error matching driver.ErrUnavailable, and cannot tell whether the store
// applied the call; applied says whether it did. The Client then cleans up as after a timeout:
// it releases, in the background, what the call may have taken.
func (b *Backend) DropNextReply(applied bool) {
	b.mu.Lock()
	b.faults = append(b.faults, fault{drop: true, applied: applied})
	b.mu.Unlock()
}

// DelayNextReply makes the store apply the Backend's next call at once and its reply arrive d
// later; a caller whose context ends first gets its context's error, the call applied.
func (b *Backend) DelayNextReply(d time.Duration) {
	b.mu.Lock()
	b.faults = append(b.faults, fault{delay: d})
	b.mu.Unlock()
}

// Partition cuts the Backend off the store for d: its calls reach the store only when d has
// passed, or fail with their context's error, unapplied, when it ends first. A renewal that
// waits past its lock's validity deadline loses the lock in the Client, as behind a cut link.
// A later Partition replaces an earlier one; Partition(0) ends it.
func (b *Backend) Partition(d time.Duration) {
	b.mu.Lock()
	b.partition = time.Now().Add(d)
	b.partitions++
	b.mu.Unlock()
}

// Close ends the Backend: waits in line end with an error matching driver.ErrClosed, and
// later calls fail so. What it holds stays in the Store until its TTL runs out, as a process's
// locks stay in Redis when it exits. Close is idempotent.
func (b *Backend) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func (b *Backend) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

var errReplyLost = fmt.Errorf("%w: memorybackend: the reply was lost (DropNextReply)", driver.ErrUnavailable)

// call runs apply as one request of the Backend, through its faults: a partition holds it
// back, a dropped reply loses its outcome, a delayed one comes late. op and name say what it
// is, for the Store's gate.
func (b *Backend) call(ctx context.Context, op, name string, apply func() error) error {
	select {
	case <-b.closed:
		return errClosed
	default:
	}
	if err := b.waitPartition(ctx); err != nil {
		return err
	}
	if g := b.s.gate; g != nil {
		g(ctx, b, op, name)
	}
	b.mu.Lock()
	var f fault
	if len(b.faults) > 0 {
		f = b.faults[0]
		b.faults = b.faults[1:]
	}
	b.mu.Unlock()
	if f.drop && !f.applied {
		return errReplyLost
	}
	err := apply()
	switch {
	case f.drop:
		return errReplyLost
	case f.delay > 0:
		t := time.NewTimer(f.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: memorybackend: the reply was delayed (DelayNextReply): %w", driver.ErrUnavailable, ctx.Err())
		}
	}
	return err
}

// waitPartition waits until the Backend's partition, if any, has ended.
func (b *Backend) waitPartition(ctx context.Context) error {
	for {
		b.mu.Lock()
		until, n := b.partition, b.partitions
		b.mu.Unlock()
		left := time.Until(until)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: memorybackend: partitioned from the store: %w", driver.ErrUnavailable, ctx.Err())
		case <-b.closed:
			t.Stop()
			return errClosed
		}
		b.mu.Lock()
		again := b.partitions != n // moved meanwhile: look again
		b.mu.Unlock()
		if !again {
			return nil
		}
	}
}

// errNoName is the error of a call with an empty name.
var errNoName = fmt.Errorf("%w: empty lock name", driver.ErrInvalid)

// check says why req cannot be asked for.
func check(req driver.Request) error {
	switch {
	case req.Name == "":
		return errNoName
	case req.TTL <= 0:
		return fmt.Errorf("%w: TTL %v: want a positive TTL", driver.ErrInvalid, req.TTL)
	case req.Limit > 0:
		return checkPermit(req)
	}
	return nil
}

// Acquire implements driver.Backend: one attempt.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (g driver.Grant, err error) {
	if err := check(req); err != nil {
		return driver.Grant{}, err
	}
	cerr := b.call(ctx, "acquire", req.Name, func() error {
		g, err = b.s.attempt(req)
		return err
	})
	if cerr != err {
		return driver.Grant{}, cerr
	}
	return g, err
}

// attempt is one attempt for req, now.
func (s *Store) attempt(req driver.Request) (driver.Grant, error) {
	var fx effects
	s.mu.Lock()
	now := time.Now()
	e := s.get(req.Name)
	s.settle(e, now, &fx)
	var g driver.Grant
	var err error
	if req.Limit > 0 {
		g, err = s.takePermit(e, req, now, len(e.permitLine))
	} else {
		g, err = s.takeLock(e, req, now)
	}
	s.finish(e, now, &fx)
	s.mu.Unlock()
	fx.run()
	return g, err
}

// AcquireQueued implements driver.Queue: it waits in the line of the lock, or of the
// semaphore, until a release or an expiry hands it what it asked for, or ctx ends.
func (b *Backend) AcquireQueued(ctx context.Context, req driver.Request) (g driver.Grant, err error) {
	if err := check(req); err != nil {
		return driver.Grant{}, err
	}
	began := b.clock()
	var waited atomic.Bool // the store put req in line: its grant is a hand-over
	tell := req.Waiting
	req.Waiting = func() {
		waited.Store(true)
		if tell != nil {
			tell()
		}
	}
	cerr := b.call(ctx, "queue", req.Name, func() error {
		g, err = b.s.queued(ctx, b, req)
		if err == nil && waited.Load() {
			// Measured on the caller's clock, as a real backend measures it in its process:
			// the store's clock may run at another rate.
			g.Elapsed = b.clock().Sub(began)
		}
		return err
	})
	if cerr != err {
		return driver.Grant{}, cerr
	}
	return g, err
}

// Renew implements driver.Backend: the leases in one request.
func (b *Backend) Renew(ctx context.Context, leases []driver.Lease) []driver.Renewal {
	out := make([]driver.Renewal, len(leases))
	var names string
	if b.s.gate != nil {
		all := make([]string, len(leases))
		for i, l := range leases {
			all[i] = l.Name
		}
		slices.Sort(all)
		names = strings.Join(all, ",")
	}
	cerr := b.call(ctx, "renew", names, func() error {
		s := b.s
		var fx effects
		s.mu.Lock()
		now := time.Now()
		for i, l := range leases {
			e := s.get(l.Name)
			s.settle(e, now, &fx)
			if l.Limit > 0 {
				out[i].Err = s.renewPermit(e, l, now)
			} else {
				out[i].Err = s.renewLock(e, l, now)
			}
			s.finish(e, now, &fx)
		}
		s.mu.Unlock()
		fx.run()
		return nil
	})
	if cerr != nil {
		for i := range out {
			out[i] = driver.Renewal{Err: cerr}
		}
	}
	return out
}

// Release implements driver.Backend.
func (b *Backend) Release(ctx context.Context, lease driver.Lease, hold string) (n int, err error) {
	if lease.Name == "" {
		return 0, errNoName
	}
	cerr := b.call(ctx, "release", lease.Name, func() error {
		n, err = b.s.release(lease, hold)
		return err
	})
	if cerr != err {
		return 0, cerr
	}
	return n, err
}

func (s *Store) release(lease driver.Lease, hold string) (int, error) {
	var fx effects
	s.mu.Lock()
	now := time.Now()
	e := s.get(lease.Name)
	s.settle(e, now, &fx)
	var n int
	var err error
	if lease.Limit > 0 {
		n, err = s.releasePermit(e, lease, hold, &fx)
	} else {
		n, err = s.releaseLock(e, lease, hold, &fx)
	}
	s.finish(e, now, &fx)
	s.mu.Unlock()
	fx.run()
	return n, err
}

// Inspect implements driver.Backend.
func (b *Backend) Inspect(ctx context.Context, name string) (info driver.Info, err error) {
	if name == "" {
		return info, errNoName
	}
	err = b.call(ctx, "inspect", name, func() error {
		b.s.read(name, func(e *entry, now time.Time) { info = lockInfo(e, now) })
		return nil
	})
	return info, err
}

// InspectSemaphore implements driver.Semaphores.
func (b *Backend) InspectSemaphore(ctx context.Context, name string) (info driver.SemaphoreInfo, err error) {
	if name == "" {
		return info, errNoName
	}
	err = b.call(ctx, "inspect-semaphore", name, func() error {
		b.s.read(name, func(e *entry, now time.Time) { info = semaphoreInfo(e, now) })
		return nil
	})
	return info, err
}

// read runs fn on the entry of name, brought up to now, under s.mu.
func (s *Store) read(name string, fn func(e *entry, now time.Time)) {
	var fx effects
	s.mu.Lock()
	now := time.Now()
	e := s.get(name)
	s.settle(e, now, &fx)
	fn(e, now)
	s.finish(e, now, &fx)
	s.mu.Unlock()
	fx.run()
}

// ForceRelease implements driver.ForceReleaser: the holder learns of it at once.
func (b *Backend) ForceRelease(ctx context.Context, name string) (info driver.Info, err error) {
	if name == "" {
		return info, errNoName
	}
	err = b.call(ctx, "force-release", name, func() error {
		b.s.change(name, func(e *entry, fx *effects) bool {
			info = lockInfo(e, time.Now())
			if e.lock != nil {
				b.s.dropLock(e, fx, errForced)
			}
			return true
		})
		return nil
	})
	return info, err
}

// Names implements driver.Namer: the names whose lock is held, or waited for.
func (b *Backend) Names(ctx context.Context, prefix string) (names []string, err error) {
	err = b.call(ctx, "names", prefix, func() error {
		names = b.s.list(prefix, func(e *entry) bool { return e.lock != nil || len(e.lockLine) > 0 })
		return nil
	})
	return names, err
}

// SemaphoreNames implements driver.SemaphoreNamer: the names whose semaphore has permits
// held, or waited for.
func (b *Backend) SemaphoreNames(ctx context.Context, prefix string) (names []string, err error) {
	err = b.call(ctx, "semaphore-names", prefix, func() error {
		names = b.s.list(prefix, func(e *entry) bool { return len(e.permits) > 0 || len(e.permitLine) > 0 })
		return nil
	})
	return names, err
}

func (s *Store) list(prefix string, keep func(*entry) bool) []string {
	var fx effects
	s.mu.Lock()
	now := time.Now()
	var out []string
	for name, e := range s.names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		s.finish(e, now, &fx)
		if keep(e) {
			out = append(out, name)
		}
	}
	s.mu.Unlock()
	fx.run()
	slices.Sort(out)
	return out
}

var (
	_ driver.Backend        = (*Backend)(nil)
	_ driver.Queue          = (*Backend)(nil)
	_ driver.Semaphores     = (*Backend)(nil)
	_ driver.ReleaseWatcher = (*Backend)(nil)
	_ driver.LossWatcher    = (*Backend)(nil)
	_ driver.Namer          = (*Backend)(nil)
	_ driver.SemaphoreNamer = (*Backend)(nil)
	_ driver.ForceReleaser  = (*Backend)(nil)
	_ driver.Expirer        = (*Backend)(nil)
)

// ExpiresByTTL implements driver.Expirer: the store lets a lock go when its TTL runs out.
func (b *Backend) ExpiresByTTL() bool { return true }
