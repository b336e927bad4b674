package fencelocktest

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// RunSemaphore runs the semaphore suite as subtests of t, for a backend that implements
// driver.Semaphores. It uses Target.DropPermit, not Target.Drop. List skips a backend that
// is no driver.SemaphoreNamer.
func RunSemaphore(t *testing.T, target Target) {
	s := suite{Target: target}
	t.Run("LimitHonoured", s.semLimitHonoured)
	t.Run("NeverMoreThanLimit", s.semNeverMoreThanLimit)
	t.Run("WaitersFirstComeFirstServed", s.semFirstComeFirstServed)
	t.Run("WaitWakesOnRelease", s.semWaitWakesOnRelease)
	t.Run("CrashedHolderPermitReturns", s.semCrashedHolder)
	t.Run("LossCancelsContextAndStaleReleaseFreesNoOther", s.semLoss)
	t.Run("LimitDisagreement", s.semLimitDisagreement)
	t.Run("WatchdogKeepsPermit", s.semWatchdogKeepsPermit)
	t.Run("RefreshAndReentryWithOwner", s.semRefreshAndReentry)
	t.Run("WaitContextEndsLeavesLine", s.semWaitContextEnds)
	t.Run("BadInput", s.semBadInput)
	t.Run("List", s.semList)
	t.Run("OneOwnerWaitsTwice", s.semOneOwnerWaitsTwice)
	t.Run("DisagreeingLimits", s.semDisagreeingLimits)
	t.Run("ContextEndsInFlight", s.semContextEndsInFlight)
	t.Run("CloseReleases", s.semCloseReleases)
	t.Run("ReentryUnderAnotherLimit", s.semReentryUnderAnotherLimit)
	t.Run("StaleReleaseLeavesTheOwnersNextPermit", s.semStaleReleaseLeavesTheOwnersNextPermit)
	t.Run("LockDelay", s.semLockDelay)
}

// The limit is honoured, permits have tokens that increase, and a released permit goes to
// the next taker.
func (s suite) semLimitHonoured(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	var permits []*fencelock.Lock
	var last int64
	for range 3 {
		p, err := s.client(t).Semaphore(name, 3).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Token() <= last {
			t.Fatalf("permit token %d after %d", p.Token(), last)
		}
		last = p.Token()
		permits = append(permits, p)
	}
	fourth := s.client(t).Semaphore(name, 3)
	_, err := fourth.TryAcquire(ctx)
	var held *fencelock.HeldError
	if !errors.As(err, &held) || !errors.Is(err, fencelock.ErrNotObtained) || held.Limit != 3 {
		t.Fatalf("a fourth permit of 3: %v, want a *HeldError of limit 3", err)
	}
	info, err := fourth.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Limit != 3 || len(info.Permits) != 3 || info.Token < last {
		t.Fatalf("Inspect: %+v, want limit 3, 3 permits and a token of at least %d", info, last)
	}
	for i, p := range info.Permits {
		if !p.Held || p.Owner == "" || p.Count != 1 || !s.remainingOK(p.Remaining) {
			t.Fatalf("Inspect: permit %d is %+v", i, p)
		}
	}
	if err := permits[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := fourth.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}
	if p.Token() <= last {
		t.Fatalf("permit token %d after %d", p.Token(), last)
	}
	for _, p := range append(permits, p) {
		_ = p.Release(ctx)
	}
	if info, err := fourth.Inspect(ctx); err != nil || len(info.Permits) != 0 {
		t.Fatalf("Inspect after every release: %+v, %v", info, err)
	}
}

// Many clients taking and releasing permits at once never believe more than the limit valid.
func (s suite) semNeverMoreThanLimit(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	const limit, workers, rounds = 3, 8, 8
	clients := []*fencelock.Client{s.client(t), s.client(t), s.client(t)}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			sem := clients[w%len(clients)].Semaphore(name, limit)
			for range rounds {
				p, err := sem.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Duration(w%3+1) * time.Millisecond)
				if err := p.Valid(); err != nil {
					errs <- err
					inside.Add(-1)
					return
				}
				inside.Add(-1)
				if err := p.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m > limit {
		t.Fatalf("%d permits of %d held at once", m, limit)
	} else if m < 2 {
		t.Fatalf("at most %d permit held at once by %d workers: the test ran nothing concurrently", m, workers)
	}
}

// Waiters get permits in the order they came.
func (s suite) semFirstComeFirstServed(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	holder, err := s.client(t).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 4
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		sem := s.client(t).Semaphore(name, 1)
		wg.Go(func() {
			p, err := sem.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			order <- i
			time.Sleep(20 * time.Millisecond)
			if err := p.Release(ctx); err != nil {
				errs <- err
			}
		})
		// In line before the next one comes.
		waitUntil(t, 10*time.Second, "the waiter never joined the line", func() bool {
			info, err := sem.Inspect(ctx)
			return err == nil && info.Waiting == i+1
		})
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d got the permit %s", got, ordinal(want))
		}
		want++
	}
}

func ordinal(i int) string {
	return [...]string{"first", "second", "third", "fourth"}[i]
}

func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(bound); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal(what)
		}
	}
}

// A waiter is woken by a release, not by the holder's TTL running out.
func (s suite) semWaitWakesOnRelease(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	const ttl = 30 * time.Second
	holder, err := s.client(t).Semaphore(name, 1).Acquire(ctx, fencelock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	sem := s.client(t).Semaphore(name, 1)
	got := make(chan error, 1)
	go func() {
		p, err := sem.Acquire(ctx, fencelock.WithTTL(ttl))
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	waitUntil(t, 10*time.Second, "the waiter never joined the line", func() bool {
		info, err := sem.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(ttl / 3):
		t.Fatalf("the waiter did not get the permit within %v of its release (the holder's TTL was %v)", time.Since(released), ttl)
	}
}

// A holder that stops without releasing gives its permit back when its TTL runs out: its
// Client and its backend close, and nothing renews the permit any more (a backend whose Close
// ends its sessions, as etcd's does, gives it back at once).
func (s suite) semCrashedHolder(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	b := s.New(t)
	dead := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(s.TTL)))
	if _, err := dead.Semaphore(name, 1).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	_ = dead.Close() // renewals stop; nothing is released
	if c, ok := b.(io.Closer); ok {
		_ = c.Close()
	}
	start := time.Now()
	p, err := s.client(t).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if waited := time.Since(start); waited > 5*s.TTL {
		t.Fatalf("the dead holder's permit came back after %v; its TTL was %v", waited, s.TTL)
	}
}

// WithLockDelay on a permit, on a store that ends locks by their TTL: a permit its holder lost
// without releasing it (nothing renewed it) stays taken for the delay after its holder stopped
// trusting it, while the semaphore's other permit is free to take; a released permit is free at
// once. A store whose locks end with a session refuses it.
func (s suite) semLockDelay(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	delay := s.TTL
	a, b := s.client(t), s.client(t)
	start := time.Now()
	lost, err := a.Semaphore(name, 2).Acquire(ctx, fencelock.WithLockDelay(delay), fencelock.WithWatchdog(false))
	if _, expires := s.New(t).(driver.Expirer); !expires {
		if !errors.Is(err, fencelock.ErrInvalid) {
			t.Fatalf("WithLockDelay on a store whose locks end with a session: %v, want ErrInvalid", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if until := lost.ValidUntil().Sub(start); until > s.TTL {
		t.Fatalf("trusted %v after the call began, past its %v TTL", until, s.TTL)
	}
	// The other permit is free, and a release under a delay frees it at once.
	other, err := b.Semaphore(name, 2).TryAcquire(ctx, fencelock.WithLockDelay(delay))
	if err != nil {
		t.Fatalf("TryAcquire of the second of 2 permits: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := b.Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire right after a release under a delay: %v", err)
	}
	// With both permits taken, the next is served once the lost one's delay has passed.
	next, err := s.client(t).Semaphore(name, 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < s.TTL+delay {
		t.Fatalf("a permit was served %v after the lost one's call began, within its TTL %v and delay %v", took, s.TTL, delay)
	}
	if <-lost.Context().Done(); !errors.Is(context.Cause(lost.Context()), fencelock.ErrLost) {
		t.Fatalf("the lost permit's context ended with %v, want ErrLost", context.Cause(lost.Context()))
	}
	_ = next.Release(ctx)
	_ = again.Release(ctx)
}

// A permit removed behind its holder's back ends its context, and the stale holder's release
// cannot free the permit another holder took since: the count never inflates.
func (s suite) semLoss(t *testing.T) {
	if s.DropPermit == nil {
		t.Skip("no Target.DropPermit")
	}
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	first, err := s.client(t).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.DropPermit(t, name, first.Owner())
	select {
	case <-first.Context().Done():
	case <-time.After(3 * s.TTL):
		t.Fatalf("the permit's context was still open %v after its permit was removed", 3*s.TTL)
	}
	if !errors.Is(context.Cause(first.Context()), fencelock.ErrLost) {
		t.Fatalf("the context of a removed permit ended with %v, want ErrLost", context.Cause(first.Context()))
	}
	second, err := s.client(t).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if err := first.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("Release of a lost permit: %v, want ErrNotHeld", err)
	}
	if p, err := s.client(t).Semaphore(name, 1).TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		if p != nil {
			_ = p.Release(ctx)
		}
		t.Fatalf("after a stale release, TryAcquire of a semaphore of 1 held by another: %v, want ErrNotObtained", err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
}

// Contenders that disagree on the limit get a typed error, not a mix of limits.
func (s suite) semLimitDisagreement(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	p, err := s.client(t).Semaphore(name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := s.client(t).Semaphore(name, 3)
	for _, try := range []func(context.Context, ...fencelock.Option) (*fencelock.Lock, error){other.TryAcquire, other.Acquire} {
		_, err = try(ctx)
		var le *fencelock.LimitError
		if !errors.As(err, &le) || !errors.Is(err, fencelock.ErrInvalid) || le.Stored != 2 || le.Limit != 3 {
			t.Fatalf("a permit of 3 while permits of 2 are held: %v, want a *LimitError", err)
		}
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit of 3 once no permit of 2 is held: %v", err)
	}
	_ = q.Release(ctx)
}

// The watchdog keeps a permit past several TTLs.
func (s suite) semWatchdogKeepsPermit(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	p, err := s.client(t).Semaphore(name, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * s.TTL)
	if err := p.Context().Err(); err != nil {
		t.Fatalf("permit lost after 3 TTLs: %v", err)
	}
	if _, err := s.client(t).Semaphore(name, 1).TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client got the only permit: %v", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Context().Err(); err == nil {
		t.Fatal("the permit's context did not end at its release")
	}
}

// A permit can be refreshed, and an Acquire with the owner of a permit enters it once more.
func (s suite) semRefreshAndReentry(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	sem := s.client(t).Semaphore(name, 2)
	owner := fencelock.WithOwner("sem-owner-" + name)
	p, err := sem.Acquire(ctx, owner, fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	again, err := sem.Acquire(ctx, owner, fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() != p.Token() || again.HoldCount() != 2 {
		t.Fatalf("re-entry: token %d count %d, want token %d count 2", again.Token(), again.HoldCount(), p.Token())
	}
	if err := p.Refresh(ctx, 2*s.TTL); err != nil {
		t.Fatal(err)
	}
	info, err := sem.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Permits) != 1 || info.Permits[0].Count != 2 || !s.remainingOK(min(info.Permits[0].Remaining, s.TTL)) {
		t.Fatalf("after a re-entry and a Refresh: %+v, want one permit of 2 holds", info)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := sem.Inspect(ctx); err != nil || len(info.Permits) != 0 {
		t.Fatalf("Inspect after both releases: %+v, %v", info, err)
	}
}

// A waiter whose context ends leaves the line and takes nothing.
func (s suite) semWaitContextEnds(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	sem := s.client(t).Semaphore(name, 1)
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.client(t).Semaphore(name, 1).Acquire(short); !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire whose context ended: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	waitUntil(t, 10*time.Second, "the waiter whose context ended is still in line", func() bool {
		info, err := sem.Inspect(ctx)
		return err == nil && info.Waiting == 0
	})
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after the waiter left: %v", err)
	}
	_ = q.Release(ctx)
}

func (s suite) semBadInput(t *testing.T) {
	ctx := bounded(t, 10*time.Second)
	c := s.client(t)
	for _, limit := range []int{0, -1} {
		if _, err := c.Semaphore(s.name(t), limit).TryAcquire(ctx); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
	if _, err := c.Semaphore("", 1).Acquire(ctx); !errors.Is(err, fencelock.ErrInvalid) {
		t.Errorf("empty name: %v, want ErrInvalid", err)
	}
	var nilClient *fencelock.Client
	if _, err := nilClient.Semaphore(s.name(t), 1).TryAcquire(ctx); !errors.Is(err, fencelock.ErrInvalid) {
		t.Errorf("nil client: %v, want ErrInvalid", err)
	}
}

// listing returns a backend of the target that lists its semaphores, or skips t.
func (s suite) listing(t *testing.T) fencelock.Backend {
	b := s.New(t)
	if _, ok := b.(driver.SemaphoreNamer); !ok {
		t.Skip("the backend cannot list its semaphores: it is no driver.SemaphoreNamer")
	}
	return b
}

// waitBehind starts a waiter for a permit of the semaphore name of 1 permit, held by someone
// else until the test ends, and returns once the waiter is in line. The function it returns
// ends the wait and checks that the waiter got nothing.
func (s suite) waitBehind(t *testing.T, ctx context.Context, name string) (stop func()) {
	waiting := s.client(t).Semaphore(name, 1)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		p, err := waiting.Acquire(wctx)
		if err == nil {
			_ = p.Release(ctx)
			err = errors.New("the waiter got a permit that was held")
		}
		waited <- err
	}()
	waitUntil(t, 10*time.Second, "the waiter never joined the line", func() bool {
		info, err := waiting.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	return func() {
		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Errorf("the waiter: %v, want context.Canceled", err)
		}
	}
}

// permitsOf checks that info's permits are those of holders, one each, with the metadata each
// holder published.
func permitsOf(t *testing.T, info fencelock.SemaphoreInfo, holders map[*fencelock.Lock]string) {
	t.Helper()
	byOwner := map[string]*fencelock.Lock{}
	for l := range holders {
		byOwner[l.Owner()] = l
	}
	for _, p := range info.Permits {
		l := byOwner[p.Owner]
		if l == nil || p.Token != l.Token() || p.Name != info.Name || !p.Held || p.Count != 1 || p.Weight != 1 {
			t.Fatalf("semaphore %s: permit %+v is none of its holders'", info.Name, p)
		}
		if p.Meta != holders[l] {
			t.Fatalf("semaphore %s: permit %+v, want the metadata of its holder, %q", info.Name, p, holders[l])
		}
		delete(byOwner, p.Owner)
	}
}

// names returns the names of sems, in order.
func names(sems []fencelock.SemaphoreInfo) []string {
	out := []string{}
	for _, s := range sems {
		out = append(out, s.Name)
	}
	return out
}

// ListSemaphores finds the semaphores with permits held or waiters whose names start with the
// prefix, each with its holders; not one whose permits were released, nor one outside the
// prefix; and the lock of a semaphore's name is in List alone, the semaphore in ListSemaphores
// alone.
func (s suite) semList(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b := s.listing(t)
	base := s.name(t)
	pfx := base + "." // one path element: ZooKeeper takes no "/" in a name
	c, other := s.client(t), s.client(t)
	a1, err := c.Semaphore(pfx+"a", 3).Acquire(ctx, fencelock.WithMetadata("worker 1"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := other.Semaphore(pfx+"a", 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := c.Semaphore(pfx+"b", 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	outside, err := c.Semaphore(base+"-outside", 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := c.Semaphore(pfx+"gone", 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lock, err := c.Obtain(ctx, pfx+"a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range []*fencelock.Lock{b1, outside, lock} {
			_ = l.Release(ctx)
		}
	}()
	// A waiter for b, which b1 holds until the end; it stops waiting before b1 is released.
	defer s.waitBehind(t, ctx, pfx+"b")()

	sems, err := fencelock.ListSemaphores(ctx, b, pfx)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sems); len(got) != 2 || got[0] != pfx+"a" || got[1] != pfx+"b" {
		t.Fatalf("ListSemaphores(%q) = %q, want %q", pfx, got, []string{pfx + "a", pfx + "b"})
	}
	sa, sb := sems[0], sems[1]
	if sa.Limit != 3 || sa.InUse != 2 || sa.Waiting != 0 || len(sa.Permits) != 2 {
		t.Fatalf("semaphore a: %+v, want limit 3, 2 permits in use, none waiting", sa)
	}
	permitsOf(t, sa, map[*fencelock.Lock]string{a1: "worker 1", a2: ""})
	if sb.Limit != 1 || sb.InUse != 1 || sb.Waiting != 1 || len(sb.Permits) != 1 || sb.Permits[0].Owner != b1.Owner() || sb.Permits[0].Token != b1.Token() {
		t.Fatalf("semaphore b: %+v, want b1's permit (%s %d) and one waiter", sb, b1.Owner(), b1.Token())
	}
	if _, ok := b.(driver.Namer); ok {
		locks, err := fencelock.List(ctx, b, pfx)
		if err != nil || len(locks) != 1 || locks[0].Name != pfx+"a" || locks[0].Owner != lock.Owner() {
			t.Fatalf("List(%q) = %+v, %v: want the lock %q alone, no semaphore", pfx, locks, err, pfx+"a")
		}
	}
	if sems, err := c.ListSemaphores(ctx, pfx+"b"); err != nil || len(sems) != 1 || sems[0].Name != pfx+"b" {
		t.Fatalf("Client.ListSemaphores(%q) = %q, %v", pfx+"b", names(sems), err)
	}

	for _, p := range []*fencelock.Lock{a1, a2} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sems, err = fencelock.ListSemaphores(ctx, b, pfx)
	if err != nil || len(sems) != 1 || sems[0].Name != pfx+"b" {
		t.Fatalf("ListSemaphores(%q) after a's permits were released = %q, %v; want b alone (a's lock is no semaphore)", pfx, names(sems), err)
	}
}
