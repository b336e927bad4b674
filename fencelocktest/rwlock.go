package fencelocktest

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// RunRWLock runs the suite of weighted permits and the read-write lock as subtests of t, for a
// backend that keeps weighted semaphores. Listed skips a backend that is no
// driver.SemaphoreNamer.
func RunRWLock(t *testing.T, target Target) {
	s := suite{Target: target}
	t.Run("WeightedPermits", s.semWeighted)
	t.Run("ReadersShareWriterAlone", s.rwShare)
	t.Run("WaitingWriterStopsNewReaders", s.rwWriterPreference)
	t.Run("DowngradeLetsNoWriterIn", s.rwDowngrade)
	t.Run("UpgradeRefusedAtOnce", s.rwUpgrade)
	t.Run("Reentry", s.rwReentry)
	t.Run("CrashedWriterLockReturns", s.rwCrashedWriter)
	t.Run("Listed", s.rwListed)
	t.Run("OneOwnerReadsTwice", s.rwOneOwnerReadsTwice)
}

// A permit of weight k takes k permits, a waiter of weight k is not passed by later ones that
// would fit, and a weight above the limit is refused.
func (s suite) semWeighted(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	sem := s.client(t).Semaphore(name, 3)
	two, err := sem.TryAcquire(ctx, fencelock.WithWeight(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client(t).Semaphore(name, 3).TryAcquire(ctx, fencelock.WithWeight(2)); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("2 more permits of 3 with 2 taken: %v, want ErrNotObtained", err)
	}
	if _, err := sem.TryAcquire(ctx, fencelock.WithWeight(4)); !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("4 permits of 3: %v, want ErrInvalid", err)
	}
	waiter := s.client(t).Semaphore(name, 3)
	got := make(chan error, 1)
	go func() {
		p, err := waiter.Acquire(ctx, fencelock.WithWeight(2))
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	waitUntil(t, 10*time.Second, "the waiter for 2 permits never joined the line", func() bool {
		info, err := sem.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	// One permit is free, but the waiter ahead needs two: a later one may not take it.
	if p, err := s.client(t).Semaphore(name, 3).TryAcquire(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		if p != nil {
			_ = p.Release(ctx)
		}
		t.Fatalf("1 permit past a waiter for 2: %v, want ErrNotObtained", err)
	}
	if info, err := sem.Inspect(ctx); err != nil || info.InUse != 2 || len(info.Permits) != 1 || info.Permits[0].Weight != 2 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	if err := two.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// Readers share the lock and a writer is kept out; a writer holds it alone, with a token above
// every earlier writer's.
func (s suite) rwShare(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	var readers []*fencelock.Lock
	for range 3 {
		r, err := s.client(t).RWLock(name).TryRLock(ctx)
		if err != nil {
			t.Fatalf("a read lock beside readers: %v", err)
		}
		readers = append(readers, r)
	}
	rw := s.client(t).RWLock(name)
	if _, err := rw.TryLock(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a write lock beside 3 readers: %v, want ErrNotObtained", err)
	}
	info, err := rw.Inspect(ctx)
	if err != nil || len(info.Permits) != 3 || info.InUse != 3 {
		t.Fatalf("Inspect with 3 readers: %+v, %v", info, err)
	}
	for _, r := range readers {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatalf("a write lock once the readers left: %v", err)
	}
	if info, err := rw.Inspect(ctx); err != nil || len(info.Permits) != 1 || info.Permits[0].Weight != fencelock.RWReaders {
		t.Fatalf("Inspect with a writer: %+v, %v", info, err)
	}
	if _, err := s.client(t).RWLock(name).TryRLock(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a read lock beside a writer: %v, want ErrNotObtained", err)
	}
	if _, err := s.client(t).RWLock(name).TryLock(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a second writer: %v, want ErrNotObtained", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Release(ctx)
	if w2.Token() <= w.Token() {
		t.Fatalf("write token %d after %d", w2.Token(), w.Token())
	}
}

// A writer waiting behind readers stops the readers that come after it: it gets the lock when
// the readers before it leave, and the later readers get it after the writer.
func (s suite) rwWriterPreference(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	first, err := s.client(t).RWLock(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rw := s.client(t).RWLock(name)
	order := make(chan string, 2)
	writer := make(chan error, 1)
	go func() {
		w, err := s.client(t).RWLock(name).Lock(ctx)
		if err == nil {
			order <- "writer"
			time.Sleep(50 * time.Millisecond)
			err = w.Release(ctx)
		}
		writer <- err
	}()
	waitUntil(t, 10*time.Second, "the writer never joined the line", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	if r, err := s.client(t).RWLock(name).TryRLock(ctx); !errors.Is(err, fencelock.ErrNotObtained) {
		if r != nil {
			_ = r.Release(ctx)
		}
		t.Fatalf("a new reader while a writer waits: %v, want ErrNotObtained", err)
	}
	reader := make(chan error, 1)
	go func() {
		r, err := s.client(t).RWLock(name).RLock(ctx)
		if err == nil {
			order <- "reader"
			err = r.Release(ctx)
		}
		reader <- err
	}()
	waitUntil(t, 10*time.Second, "the later reader never joined the line", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && info.Waiting == 2
	})
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	if err := <-reader; err != nil {
		t.Fatal(err)
	}
	if a, b := <-order, <-order; a != "writer" || b != "reader" {
		t.Fatalf("served %s, then %s; want the waiting writer before the later reader", a, b)
	}
}

// A reader under a writer's context holds on when the write lock is released: the holder is
// downgraded with no moment unlocked, so a writer waiting meanwhile does not get in.
func (s suite) rwDowngrade(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	rw := s.client(t).RWLock(name)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(w.Context())
	if err != nil {
		t.Fatalf("a read lock under the write lock: %v", err)
	}
	if r.Token() != w.Token() || r.HoldCount() != 2 {
		t.Fatalf("the read lock under the write lock: token %d count %d, want token %d count 2", r.Token(), r.HoldCount(), w.Token())
	}
	other := s.client(t).RWLock(name)
	got := make(chan error, 1)
	go func() {
		w2, err := other.Lock(ctx)
		if err == nil {
			err = w2.Release(ctx)
		}
		got <- err
	}()
	waitUntil(t, 10*time.Second, "the second writer never joined the line", func() bool {
		info, err := other.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := other.Inspect(ctx); err != nil || len(info.Permits) != 1 || info.Permits[0].Weight != 1 || info.Permits[0].Token != r.Token() {
		t.Fatalf("after the downgrade: %+v, %v; want the holder as one reader", info, err)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiting writer got in (%v) while the downgraded reader held on", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := r.Valid(); err != nil {
		t.Fatalf("the downgraded read lock: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting writer after the reader left: %v", err)
	}
}

// A write lock under a read lock is refused at once, and the read lock stays.
func (s suite) rwUpgrade(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	rw := s.client(t).RWLock(s.name(t))
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	start := time.Now()
	_, err = rw.Lock(r.Context())
	if !errors.Is(err, fencelock.ErrUpgrade) || !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("a write lock under a read lock: %v, want ErrUpgrade", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the refused upgrade took %v", waited)
	}
	if err := r.Valid(); err != nil || r.HoldCount() != 1 {
		t.Fatalf("the read lock after a refused upgrade: %v, %d holds", err, r.HoldCount())
	}
}

// A read lock under a read lock, and a write lock under a write lock, enter the same hold.
func (s suite) rwReentry(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	rw := s.client(t).RWLock(s.name(t))
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(r.Context())
	if err != nil || r2.Token() != r.Token() || r2.HoldCount() != 2 {
		t.Fatalf("a read lock under a read lock: %v", err)
	}
	_ = r2.Release(ctx)
	_ = r.Release(ctx)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := rw.Lock(w.Context())
	if err != nil || w2.Token() != w.Token() || w2.HoldCount() != 2 {
		t.Fatalf("a write lock under a write lock: %v", err)
	}
	_ = w2.Release(ctx)
	_ = w.Release(ctx)
	if info, err := rw.Inspect(ctx); err != nil || len(info.Permits) != 0 {
		t.Fatalf("Inspect after every release: %+v, %v", info, err)
	}
}

// A writer that stops without releasing gives the lock back when its TTL runs out.
func (s suite) rwCrashedWriter(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	name := s.name(t)
	b := s.New(t)
	dead := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(s.TTL)))
	if _, err := dead.RWLock(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = dead.Close()
	if c, ok := b.(io.Closer); ok {
		_ = c.Close()
	}
	start := time.Now()
	r, err := s.client(t).RWLock(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	if waited := time.Since(start); waited > 5*s.TTL {
		t.Fatalf("the dead writer's lock came back after %v; its TTL was %v", waited, s.TTL)
	}
}

// A read-write lock is listed with the semaphores, as the semaphore of RWReaders permits it
// is: a writer takes every permit, a reader one.
func (s suite) rwListed(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b := s.listing(t)
	pfx := s.name(t) + "." // one path element: ZooKeeper takes no "/" in a name
	rw := s.client(t).RWLock(pfx + "rw")
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sems, err := fencelock.ListSemaphores(ctx, b, pfx)
	if err != nil || len(sems) != 1 {
		t.Fatalf("ListSemaphores(%q) while write-locked = %+v, %v; want the lock's semaphore", pfx, sems, err)
	}
	if si := sems[0]; si.Name != pfx+"rw" || si.Limit != fencelock.RWReaders || si.InUse != fencelock.RWReaders || len(si.Permits) != 1 ||
		si.Permits[0].Owner != w.Owner() || si.Permits[0].Weight != fencelock.RWReaders {
		t.Fatalf("the write-locked semaphore: %+v, want the writer's permit of every permit", si)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var readers []*fencelock.Lock
	for _, c := range []*fencelock.Client{s.client(t), s.client(t)} {
		r, err := c.RWLock(pfx + "rw").RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	sems, err = fencelock.ListSemaphores(ctx, b, pfx)
	if err != nil || len(sems) != 1 || sems[0].InUse != 2 || len(sems[0].Permits) != 2 {
		t.Fatalf("ListSemaphores(%q) with two readers = %+v, %v", pfx, sems, err)
	}
	for _, r := range readers {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if sems, err := fencelock.ListSemaphores(ctx, b, pfx); err != nil || len(sems) != 0 {
		t.Fatalf("ListSemaphores(%q) once every reader released = %+v, %v", pfx, sems, err)
	}
}
