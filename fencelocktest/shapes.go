package fencelocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// The shapes every attack on fencelock came back with, drawn against each primitive: one
// owner's concurrent calls, a context that ends while a call is in flight, callers that
// disagree, and a Client closed while it holds. Each case here found a hole in one backend or
// another that the stories above walked past.

// A Client closed while it holds a lock releases it: the next contender gets the name at
// once, not when a TTL or the Backend's session ends.
func (s suite) closeReleases(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	c, other := s.client(t), s.client(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Obtain(lock.Context(), name) // a second hold of the same lock
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*fencelock.Lock{lock, again} {
		if err := l.Context().Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, fencelock.ErrClosed) {
			t.Fatalf("a lock's context after Close: %v, want ErrLost and ErrClosed", err)
		}
	}
	if info, err := other.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("Inspect once Close returned: %+v, %v; want the lock free", info, err)
	}
	next, err := other.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("TryObtain once the holder's Client closed: %v", err)
	}
	_ = next.Release(ctx)
}

// An Obtain that waits in line while its Client closes fails with ErrClosed when the lock
// comes to it, and releases what the store granted it: the name is free at once for the
// next contender, not after the TTL of a lock no one holds.
func (s suite) closeWhileWaiting(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	waits := make(chan struct{}, 1)
	holder, waiter, other := s.client(t), s.waitingClient(t, waits), s.client(t)
	held, err := holder.Obtain(ctx, name, fencelock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Obtain(ctx, name, fencelock.WithTTL(20*time.Second))
		if err == nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	select {
	case <-waits:
	case <-ctx.Done():
		t.Fatal("the second Obtain never waited")
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("the Obtain of a Client closed while it waited: %v, want ErrClosed", err)
	}
	next, err := other.TryObtain(ctx, name)
	if err != nil {
		info, _ := other.Inspect(ctx, name)
		t.Fatalf("TryObtain once the closed Client's call returned: %v (%+v)", err, info)
	}
	_ = next.Release(ctx)
}

// Calls whose contexts end while their request is in flight leave nothing held for no one:
// once the Client's clean-up is done (Close waits for it), the name is free, at the latest
// when a leftover's TTL has run out. A backend that keeps what such a call left alive for
// as long as the process (a session's lease) never frees it.
func (s suite) contextEndsInFlight(t *testing.T) {
	s.endsInFlight(t, func(c *fencelock.Client, ctx context.Context, name string) (*fencelock.Lock, error) {
		return c.TryObtain(ctx, name)
	}, func(c *fencelock.Client, ctx context.Context, name string) (*fencelock.Lock, error) {
		return c.Obtain(ctx, name)
	})
}

// endsInFlight runs tries with contexts that end within microseconds to a few milliseconds of
// the call, as calls under a request's deadline do, then checks that the name is free, with
// the first of them: a single attempt.
func (s suite) endsInFlight(t *testing.T, tries ...func(c *fencelock.Client, ctx context.Context, name string) (*fencelock.Lock, error)) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	c, other := s.client(t), s.client(t)
	got, cut := 0, 0
	for i := range 240 {
		short, cancel := context.WithTimeout(ctx, time.Duration(i%24*(i%24))*10*time.Microsecond) // 0 to 5.3 ms
		l, err := tries[i%len(tries)](c, short, name)
		cancel()
		if err != nil {
			cut++
			continue
		}
		got++
		_ = l.Release(ctx)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// A leftover may stay as long as its TTL, and its clean-up as long as the Backend's (the
	// Client's is over: Close waited for it); past that, it is held for no one.
	bound := 2*s.TTL + 5*time.Second
	deadline := time.Now().Add(bound)
	for {
		l, err := tries[0](other, ctx, name)
		if err == nil {
			_ = l.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d calls granted and %d cut short, the name is still held %v after the Client closed: %v", got, cut, bound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d calls granted, %d cut short", got, cut)
}

// As contextEndsInFlight, for permits of a semaphore of 1.
func (s suite) semContextEndsInFlight(t *testing.T) {
	s.endsInFlight(t, func(c *fencelock.Client, ctx context.Context, name string) (*fencelock.Lock, error) {
		return c.Semaphore(name, 1).TryAcquire(ctx)
	}, func(c *fencelock.Client, ctx context.Context, name string) (*fencelock.Lock, error) {
		return c.Semaphore(name, 1).Acquire(ctx)
	})
}

// Two goroutines of one process wait under one owner (WithOwner) for a full semaphore: both
// get a hold of the owner's one permit, and the store counts both, so that releasing either
// leaves the permit to the other. The store once recorded one of them, and the release of
// that one let the next waiter in beside the other.
func (s suite) semOneOwnerWaitsTwice(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	holder, err := s.client(t).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 2)
	c := s.waitingClient(t, waiting)
	owner := "owner-" + name
	sem := c.Semaphore(name, 1)
	permits := make(chan *fencelock.Lock, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			p, err := sem.Acquire(ctx, fencelock.WithOwner(owner))
			if err != nil {
				errs <- err
				return
			}
			permits <- p
		}()
	}
	for range 2 {
		select {
		case <-waiting:
		case err := <-errs:
			t.Fatalf("a waiter of the owner: %v", err)
		case <-ctx.Done():
			t.Fatal("the two waiters of one owner never both waited")
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var mine []*fencelock.Lock
	for range 2 {
		select {
		case p := <-permits:
			mine = append(mine, p)
		case err := <-errs:
			t.Fatalf("a waiter of the owner: %v", err)
		}
	}
	info, err := sem.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Permits) != 1 || info.Permits[0].Owner != owner || info.Permits[0].Count != 2 {
		t.Fatalf("both waiters of one owner hold: Inspect says %+v, want one permit of %q with 2 holds", info, owner)
	}
	other := s.client(t).Semaphore(name, 1)
	for i, p := range mine {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			break
		}
		if err := mine[1].Valid(); err != nil {
			t.Fatalf("the owner's other hold after one was released: %v", err)
		}
		if q, err := other.TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
			if q != nil {
				_ = q.Release(ctx)
			}
			t.Fatalf("another permit while one owner's hold remains: %v, want ErrNotObtained", err)
		}
	}
	q, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit once the owner released both holds: %v", err)
	}
	_ = q.Release(ctx)
}

// Two goroutines of one process wait under one owner for a lock another holds: once it is
// released, both hold it, as two holds of the owner's one lock; the store counts both.
func (s suite) oneOwnerWaitsTwice(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	holder, err := s.client(t).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 2)
	c := s.waitingClient(t, waiting)
	owner := "owner-" + name
	locks := make(chan *fencelock.Lock, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			l, err := c.Obtain(ctx, name, fencelock.WithOwner(owner))
			if err != nil {
				errs <- err
				return
			}
			locks <- l
		}()
	}
	for range 2 {
		select {
		case <-waiting:
		case err := <-errs:
			t.Fatalf("a waiter of the owner: %v", err)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var mine []*fencelock.Lock
	for range 2 {
		select {
		case l := <-locks:
			mine = append(mine, l)
		case err := <-errs:
			t.Fatalf("a waiter of the owner, once the other holder released: %v", err)
		}
	}
	if info, err := c.Inspect(ctx, name); err != nil || !info.Held || info.Owner != owner || info.Count != 2 {
		t.Fatalf("both waiters of one owner hold: Inspect says %+v, %v; want %q with 2 holds", info, err, owner)
	}
	if err := mine[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := s.client(t).TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		if l != nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("another owner while one owner's hold remains: %v, want ErrNotObtained", err)
	}
	if err := mine[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Callers that disagree on a semaphore's limit, looping on one name, never hold permits of
// two limits at once: the limit is the one the holders agreed on, until none is held. A
// refused caller must leave nothing behind that makes the next ones agree with it.
func (s suite) semDisagreeingLimits(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	var mu sync.Mutex
	held := map[*fencelock.Lock]int{} // permits believed valid, by limit
	var grants, refused atomic.Int64
	var mixed []string
	check := func(p *fencelock.Lock, limit int) {
		mu.Lock()
		defer mu.Unlock()
		held[p] = limit
		n, limits := 0, map[int]int{}
		for q, l := range held {
			if q.Valid() == nil {
				n++
				limits[l]++
			}
		}
		if len(limits) > 1 && len(mixed) < 5 {
			mixed = append(mixed, fmt.Sprintf("permits of limits %v believed valid at once", limits))
		}
	}
	end := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range 4 {
		limit := 2 + w%2
		sem := s.client(t).Semaphore(name, limit)
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				p, err := sem.Acquire(actx)
				cancel()
				var le *fencelock.LimitError
				switch {
				case errors.As(err, &le):
					refused.Add(1)
					continue
				case err != nil:
					continue
				}
				grants.Add(1)
				check(p, limit)
				time.Sleep(time.Duration(i%3) * time.Millisecond) // the work
				mu.Lock()
				delete(held, p)
				mu.Unlock()
				_ = p.Release(ctx)
			}
		})
	}
	wg.Wait()
	for _, m := range mixed {
		t.Error(m)
	}
	if grants.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("%d grants and %d refusals: the callers never met", grants.Load(), refused.Load())
	}
}

// A Client closed while it holds a permit releases it.
func (s suite) semCloseReleases(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	c := s.client(t)
	if _, err := c.Semaphore(name, 1).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := s.client(t).Semaphore(name, 1).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire once the holder's Client closed: %v", err)
	}
	_ = p.Release(ctx)
}

// Two readers of one owner wait behind a writer: both hold once it leaves, and while one of
// them still holds, a writer waiting meanwhile does not get in.
func (s suite) rwOneOwnerReadsTwice(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	w, err := s.client(t).RWLock(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 2)
	c := s.waitingClient(t, waiting)
	owner := "owner-" + name
	rw := c.RWLock(name)
	readers := make(chan *fencelock.Lock, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			r, err := rw.RLock(ctx, fencelock.WithOwner(owner))
			if err != nil {
				errs <- err
				return
			}
			readers <- r
		}()
	}
	for range 2 {
		select {
		case <-waiting:
		case err := <-errs:
			t.Fatalf("a reader of the owner: %v", err)
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1, r2 := <-readers, <-readers
	writer := s.client(t).RWLock(name)
	if info, err := writer.Inspect(ctx); err != nil || len(info.Permits) != 1 || info.Permits[0].Owner != owner || info.Permits[0].Count != 2 {
		t.Fatalf("both readers of one owner hold: Inspect says %+v, %v; want one read lock of %q with 2 holds", info, err, owner)
	}
	wrote := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		w2, err := writer.Lock(wctx)
		if err == nil {
			if r2.Valid() == nil {
				err = errors.New("a writer got the lock while a reader of the owner still held it")
			}
			_ = w2.Release(ctx)
		}
		wrote <- err
	}()
	waitUntil(t, 10*time.Second, "the writer never joined the line", func() bool {
		info, err := writer.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := writer.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Permits) != 1 || info.Permits[0].Owner != owner {
		t.Fatalf("one reader of two released: Inspect says %+v, want the owner's read lock alone", info)
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// A leader whose Client closes resigns: another contender leads at once.
func (s suite) electCloseResigns(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	c := s.client(t)
	l, err := c.Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Valid(); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("the leadership after Close: %v, want ErrLost", err)
	}
	b := s.client(t).Election(name)
	if now, err := b.Leader(ctx); err != nil || now.Elected {
		t.Fatalf("Leader once the leader's Client closed: %+v, %v; want no leader", now, err)
	}
	next, err := b.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	_ = next.Resign(ctx)
}

// An owner that holds a permit and asks again under another limit is refused, as any caller
// of another limit is while permits are held: its re-entry does not make the limit its.
func (s suite) semReentryUnderAnotherLimit(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	c := s.client(t)
	owner := fencelock.WithOwner("owner-" + name)
	p, err := c.Semaphore(name, 3).TryAcquire(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	q, err := c.Semaphore(name, 2).TryAcquire(ctx, owner)
	var le *fencelock.LimitError
	if !errors.As(err, &le) || le.Stored != 3 || le.Limit != 2 {
		if q != nil {
			_ = q.Release(ctx)
		}
		t.Fatalf("the owner's re-entry under limit 2 while it holds a permit of 3: %v, want a *LimitError", err)
	}
}

// WithMaxHold ends a lock its watchdog renews at the cap: its context ends with ErrMaxHold
// and ErrLost, its validity never passed the cap, and the next contender gets the name.
func (s suite) maxHold(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	c, other := s.client(t), s.client(t)
	start := time.Now()
	limit := 2 * s.TTL
	lock, err := c.Obtain(ctx, name, fencelock.WithMaxHold(limit))
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now() // the cap counts from the grant's request, sent before this
	defer lock.Release(ctx)
	select {
	case <-lock.Context().Done():
	case <-ctx.Done():
		t.Fatalf("the lock outlived its %v cap", limit)
	}
	if took := time.Since(start); took < limit-s.TTL/2 {
		t.Fatalf("the lock ended %v after the call, before its %v cap", took, limit)
	}
	if until := lock.ValidUntil(); until.After(granted.Add(limit)) {
		t.Fatalf("valid until %v after the grant returned, past the %v cap", until.Sub(granted), limit)
	}
	if cause := context.Cause(lock.Context()); !errors.Is(cause, fencelock.ErrMaxHold) || !errors.Is(cause, fencelock.ErrLost) {
		t.Fatalf("the cause at the cap: %v, want ErrMaxHold and ErrLost", cause)
	}
	next, err := other.Obtain(ctx, name)
	if err != nil {
		t.Fatalf("the next contender, once the holder reached its cap: %v", err)
	}
	_ = next.Release(ctx)
}

// A handle of a lock that was lost, released after its owner took the name again, is told it
// holds nothing, and leaves the owner's new hold as it is: the new grant is another lock, of
// another token, even under the same owner ID.
func (s suite) staleReleaseLeavesTheOwnersNextLock(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	c := s.client(t)
	name := s.name(t)
	owner := fencelock.WithOwner("owner-" + name)
	stale, err := c.TryObtain(ctx, name, owner, fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	s.Drop(t, name)
	fresh, err := c.TryObtain(ctx, name, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if fresh.Token() <= stale.Token() || fresh.HoldCount() != 1 {
		t.Fatalf("the owner's grant after its lock was dropped: token %d count %d, want a new lock above token %d", fresh.Token(), fresh.HoldCount(), stale.Token())
	}
	if err := stale.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) && !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("the lost lock's release, once its owner holds the name again: %v, want ErrNotHeld", err)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Token != fresh.Token() || info.Count != 1 {
		t.Fatalf("the owner's new lock after the stale release: %+v, want it held once under token %d", info, fresh.Token())
	}
}

// A handle of a permit that was lost, released after its owner took a permit again, is told it
// holds nothing, and leaves the owner's new permit as it is.
func (s suite) semStaleReleaseLeavesTheOwnersNextPermit(t *testing.T) {
	if s.DropPermit == nil {
		t.Skip("no Target.DropPermit")
	}
	ctx := bounded(t, 60*time.Second)
	c := s.client(t)
	name := s.name(t)
	id := "owner-" + name
	sem := c.Semaphore(name, 2)
	stale, err := sem.TryAcquire(ctx, fencelock.WithOwner(id), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	s.DropPermit(t, name, id)
	fresh, err := sem.TryAcquire(ctx, fencelock.WithOwner(id))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if fresh.Token() <= stale.Token() || fresh.HoldCount() != 1 {
		t.Fatalf("the owner's permit after its permit was dropped: token %d count %d, want a new permit above token %d", fresh.Token(), fresh.HoldCount(), stale.Token())
	}
	if err := stale.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) && !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("the lost permit's release, once its owner holds one again: %v, want ErrNotHeld", err)
	}
	info, err := sem.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.InUse != 1 || len(info.Permits) != 1 || info.Permits[0].Token != fresh.Token() || info.Permits[0].Count != 1 {
		t.Fatalf("the owner's new permit after the stale release: %+v, want it held once under token %d", info, fresh.Token())
	}
}

// WithMinHold keeps a lock released early taken until the minimum has passed since its grant,
// also once its Client is closed: the release ends the handle at once, a contender meanwhile
// is refused, and a waiter is served only once the minimum has passed.
func (s suite) minHold(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	c, other := s.client(t), s.client(t)
	floor := 2 * s.TTL
	start := time.Now()
	lock, err := c.Obtain(ctx, name, fencelock.WithMinHold(floor))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("a release before the minimum: %v", err)
	}
	if !errors.Is(lock.Context().Err(), context.Canceled) || lock.Valid() == nil {
		t.Fatalf("the handle after its release: context %v, valid %v; want it ended", lock.Context().Err(), lock.Valid())
	}
	if time.Since(start) < floor/2 {
		var held *fencelock.HeldError
		if l, err := other.TryObtain(ctx, name); !errors.As(err, &held) {
			if l != nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("TryObtain %v after the grant, within its %v minimum: %v, want a *HeldError", time.Since(start), floor, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := other.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if took := time.Since(start); took < floor {
		t.Fatalf("the next holder was served %v after the first one's call began, within its %v minimum", took, floor)
	}
}

// ObtainAll: callers that want overlapping sets, listed in opposite orders, never deadlock and
// never hold a name at once; a set that fails half-way leaves none of its names taken in the
// store; the set's context re-enters each of its locks.
func (s suite) obtainAll(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	base := s.name(t)
	a, b, c := base+"-a", base+"-b", base+"-c"
	var mu sync.Mutex
	holding := map[string]int{}
	var wg sync.WaitGroup
	for i, set := range [][]string{{a, b, c}, {c, b, a}, {c, a}} {
		client := s.client(t)
		wg.Go(func() {
			for round := range 10 {
				m, err := client.ObtainAll(ctx, set)
				if err != nil {
					t.Errorf("caller %d round %d: %v", i, round, err)
					return
				}
				mu.Lock()
				for _, l := range m.Locks() {
					if holding[l.Name()]++; holding[l.Name()] > 1 {
						t.Errorf("caller %d round %d: %s held twice", i, round, l.Name())
					}
				}
				mu.Unlock()
				for _, l := range m.Locks() {
					if info, err := client.Inspect(ctx, l.Name()); err != nil || info.Token != l.Token() {
						t.Errorf("caller %d round %d: the store's %s while the set holds it: %+v, %v; want token %d", i, round, l.Name(), info, err, l.Token())
					}
				}
				mu.Lock()
				for _, l := range m.Locks() {
					holding[l.Name()]--
				}
				mu.Unlock()
				if err := m.Release(ctx); err != nil {
					t.Errorf("caller %d round %d: release: %v", i, round, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	one, other := s.client(t), s.client(t)
	held, err := other.Obtain(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	var he *fencelock.HeldError
	var me *fencelock.MultiError
	if m, err := one.TryObtainAll(ctx, []string{c, b, a}); m != nil || !errors.As(err, &he) || !errors.As(err, &me) || me.Name != b {
		t.Fatalf("TryObtainAll with %s held elsewhere: %v; want a *MultiError for it matching *HeldError", b, err)
	}
	for _, name := range []string{a, c} {
		if info, err := other.Inspect(ctx, name); err != nil || info.Held {
			t.Fatalf("%s once the set failed at %s: %+v, %v; want it free", name, b, info, err)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := one.ObtainAll(ctx, []string{c, a})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	for _, l := range m.Locks() {
		again, err := one.Obtain(m.Context(), l.Name())
		if err != nil || again.Token() != l.Token() || again.HoldCount() != 2 {
			t.Fatalf("an Obtain of %s through the set's context: %v; want a re-entry of token %d", l.Name(), err, l.Token())
		}
		_ = again.Release(ctx)
	}
}

// WithLockDelay, on a store that ends locks by their TTL: a holder that stops renewing is
// trusted for its TTL, and the store keeps the lock from others for the delay after that; a
// waiter handed the lock for a claim shorter than its delay is renewed before Obtain returns;
// a Release frees the name at once. A store whose locks end with a session refuses it.
func (s suite) lockDelay(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	delay := s.TTL
	a, b := s.client(t), s.client(t)
	waiting := make(chan struct{}, 1)
	w := s.waitingClient(t, waiting)
	start := time.Now()
	lock, err := a.Obtain(ctx, name, fencelock.WithLockDelay(delay), fencelock.WithWatchdog(false))
	if _, expires := s.New(t).(driver.Expirer); !expires {
		if !errors.Is(err, fencelock.ErrInvalid) {
			t.Fatalf("WithLockDelay on a store whose locks end with a session: %v, want ErrInvalid", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// Trusted for the TTL, not the TTL and the delay. A validity counts from the request's
	// send, which may come well after the call began (Redlock's first call asks every node
	// who it is first), but not after it returned.
	if until := time.Until(lock.ValidUntil()); until > s.TTL {
		t.Fatalf("trusted %v after the call returned, past its %v TTL", until, s.TTL)
	}
	next, err := b.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < s.TTL+delay {
		t.Fatalf("the next holder was served %v after the first one's call began, within its TTL %v and delay %v", took, s.TTL, delay)
	}
	// A waiter whose delay is longer than the claim a hand-over gives (Redis: 5 s at most).
	done := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := w.Obtain(ctx, name, fencelock.WithLockDelay(6*time.Second))
		if err != nil {
			t.Errorf("a waiter under a 6 s delay: %v", err)
		}
		done <- l
	}()
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the waiter never began to wait")
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	handed := <-done
	if handed == nil {
		return
	}
	if err := handed.Valid(); err != nil || time.Until(handed.ValidUntil()) < s.TTL/2 {
		t.Fatalf("a waiter handed the lock under a 6 s delay: %v, trusted for %v; want most of its %v TTL", err, time.Until(handed.ValidUntil()), s.TTL)
	}
	// A Release frees the name at once, whatever the delay.
	if err := handed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := b.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("TryObtain right after a release under a 6 s delay: %v", err)
	}
	_ = again.Release(ctx)
}

// Processes that share an owner (WithOwner) take one lock in bursts, a slot at a time so that
// their first acquisitions meet on a free name, while a process of another owner tries to take
// it: no grant of the other owner may be believed valid beside a hold of the shared owner. A
// hold is believed from its grant's return until its release began or its validity ended; one
// lost before its release is not counted, since when it learned of the loss is not known. On
// Redlock a token round, a write-back or a release of one process dropped holds another
// process's acquisition had just made (docs/SAFETY.md, December 2026).
func (s suite) sharedOwnerBesideAnother(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	const processes, slot, run = 3, 40 * time.Millisecond, 3 * time.Second
	clients := make([]*fencelock.Client, processes+1)
	for i := range clients {
		clients[i] = s.client(t) // a Backend each: as many processes
	}
	type belief struct {
		token      int64
		from, till time.Time
	}
	var mu sync.Mutex
	var shared, others []belief
	hold := func(c *fencelock.Client, wait bool, keep time.Duration, to *[]belief, opts ...fencelock.Option) {
		var l *fencelock.Lock
		var err error
		if wait {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			l, err = c.Obtain(wctx, name, opts...)
			cancel()
		} else {
			l, err = c.TryObtain(ctx, name, opts...)
		}
		if err != nil {
			return
		}
		got := time.Now()
		time.Sleep(keep)
		till := time.Now()
		if v := l.ValidUntil(); v.Before(till) {
			till = v
		}
		lost := l.Valid() != nil
		_ = l.Release(ctx)
		if !lost {
			mu.Lock()
			*to = append(*to, belief{l.Token(), got, till})
			mu.Unlock()
		}
	}
	began := time.Now()
	end := began.Add(run)
	var wg sync.WaitGroup
	for p := range processes {
		wg.Go(func() {
			for i := 0; ; i++ {
				at := began.Add(time.Duration(i)*slot + time.Duration((i*7+p*3)%10)*100*time.Microsecond)
				if at.After(end) {
					return
				}
				if time.Now().After(at) {
					continue // the last burst took the slot
				}
				time.Sleep(time.Until(at))
				var burst sync.WaitGroup
				for k := range 1 + (i+p)%3 {
					burst.Go(func() {
						hold(clients[p], k%2 == 0, time.Duration(k)*time.Millisecond, &shared, fencelock.WithOwner("shared"))
					})
				}
				burst.Wait()
			}
		})
	}
	wg.Go(func() {
		for i := 0; time.Now().Before(end); i++ {
			hold(clients[processes], i%2 == 0, time.Millisecond, &others)
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	if len(shared) == 0 || len(others) == 0 {
		t.Fatalf("%d grants of the shared owner and %d of the other: the run tested nothing", len(shared), len(others))
	}
	for _, o := range others {
		for _, h := range shared {
			if o.from.Before(h.till) && h.from.Before(o.till) {
				t.Fatalf("the other owner's grant (token %d) believed valid from %v to %v, beside the shared owner's (token %d) from %v to %v",
					o.token, o.from.Format(stamp), o.till.Format(stamp), h.token, h.from.Format(stamp), h.till.Format(stamp))
			}
		}
	}
	t.Logf("%d grants of the shared owner, %d of the other", len(shared), len(others))
}

const stamp = "15:04:05.000000"
