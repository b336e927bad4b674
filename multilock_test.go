package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// TryObtainAll is all or none: a name held elsewhere half-way through the set leaves none of
// the set taken, in the store, and the error names it.
func TestTryObtainAllTakesAllOrNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		ctx := t.Context()
		other, err := b.Obtain(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(ctx)
		m, err := a.TryObtainAll(ctx, []string{"z", "a", "m"})
		var held *fencelock.HeldError
		var me *fencelock.MultiError
		if m != nil || !errors.As(err, &held) || !errors.Is(err, fencelock.ErrNotObtained) || !errors.As(err, &me) || me.Name != "m" {
			t.Fatalf("TryObtainAll with m held elsewhere: %v, %v; want a *MultiError for m matching *HeldError", m, err)
		}
		synctest.Wait()
		for _, name := range []string{"a", "z"} {
			if info, err := b.Inspect(ctx, name); err != nil || info.Held {
				t.Fatalf("%s after the set failed at m: %+v, %v; want it free", name, info, err)
			}
		}
	})
}

// Callers that want overlapping sets, listed in opposite orders, never wait for each other in a
// cycle and never hold a name at once.
func TestObtainAllNeverDeadlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		sets := [][]string{{"x", "y", "z"}, {"z", "y"}, {"y", "x"}, {"z", "x", "y", "x"}}
		var mu sync.Mutex
		holding := map[string]int{}
		var wg sync.WaitGroup
		for i, set := range sets {
			c := fencelock.New(store.Backend())
			defer c.Close()
			wg.Go(func() {
				for round := range 50 {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					m, err := c.ObtainAll(ctx, set, fencelock.WithTTL(time.Second))
					cancel()
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
					time.Sleep(time.Duration(1+round%3) * time.Millisecond)
					mu.Lock()
					for _, l := range m.Locks() {
						holding[l.Name()]--
					}
					mu.Unlock()
					if err := m.Release(t.Context()); err != nil {
						t.Errorf("caller %d round %d: release: %v", i, round, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

// A context that ends while ObtainAll waits for the last name releases what it took, and the
// call returns by the deadline.
func TestObtainAllContextEndsReleasesWhatWasTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		other, err := b.Obtain(t.Context(), "c")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(context.Background())
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		m, err := a.ObtainAll(ctx, []string{"c", "b", "a"})
		if m != nil || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("ObtainAll whose context ended: %v, %v; want ErrNotObtained and DeadlineExceeded", m, err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("ObtainAll returned %v after its call, want at its 1 s deadline", took)
		}
		synctest.Wait()
		for _, name := range []string{"a", "b"} {
			if info, err := b.Inspect(t.Context(), name); err != nil || info.Held {
				t.Fatalf("%s after the set's context ended: %+v, %v; want it free", name, info, err)
			}
		}
		// WithWaitTimeout bounds the whole call, not each name's wait.
		start = time.Now()
		if _, err := a.ObtainAll(t.Context(), []string{"a", "c"}, fencelock.WithWaitTimeout(time.Second)); !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("ObtainAll past its wait timeout: %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("ObtainAll with a 1 s wait timeout returned after %v", took)
		}
	})
}

// The set's context ends when any of its locks is lost, with that loss as its cause; the
// set's tokens are its locks'; an Obtain through its context re-enters the lock of that name;
// Release frees every name and ends the context.
func TestMultiLockHandle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a := fencelock.New(store.Backend())
		defer a.Close()
		admin := store.Backend()
		ctx := t.Context()
		m, err := a.ObtainAll(ctx, []string{"to", "from", "to"})
		if err != nil {
			t.Fatal(err)
		}
		locks := m.Locks()
		if len(locks) != 2 || locks[0].Name() != "from" || locks[1].Name() != "to" {
			t.Fatalf("the set's locks: %v, want from and to, once each, sorted", names(locks))
		}
		for _, l := range locks {
			if m.Token(l.Name()) != l.Token() || m.Lock(l.Name()) != l {
				t.Fatalf("the set's token of %s: %d, want %d", l.Name(), m.Token(l.Name()), l.Token())
			}
		}
		if m.Token("other") != 0 || m.Lock("other") != nil {
			t.Fatal("the set answers for a name it has not")
		}
		for _, l := range locks {
			again, err := a.Obtain(m.Context(), l.Name())
			if err != nil || again.Token() != l.Token() || again.HoldCount() != 2 {
				t.Fatalf("an Obtain of %s through the set's context: %v; want a re-entry", l.Name(), err)
			}
			if err := again.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := admin.ForceRelease(ctx, "from"); err != nil {
			t.Fatal(err)
		}
		<-m.Context().Done()
		if cause := context.Cause(m.Context()); !errors.Is(cause, fencelock.ErrLost) {
			t.Fatalf("the set's context once from was taken away: %v, want ErrLost", cause)
		}
		var me *fencelock.MultiError
		if err := m.Valid(); !errors.As(err, &me) || me.Name != "from" || !errors.Is(err, fencelock.ErrLost) {
			t.Fatalf("Valid once from was lost: %v", err)
		}
		if err := m.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
			t.Fatalf("the set's release with from lost: %v, want from's ErrNotHeld", err)
		}
		if info, err := a.Inspect(ctx, "to"); err != nil || info.Held {
			t.Fatalf("to after the set's release: %+v, %v; want it free", info, err)
		}
		if err := m.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
			t.Fatalf("a second release: %v, want the first one's result", err)
		}
	})
}

// No names, or an empty one, is bad input, and nothing is taken.
func TestObtainAllBadInput(t *testing.T) {
	store := memorybackend.New()
	c := fencelock.New(store.Backend())
	defer c.Close()
	for _, set := range [][]string{nil, {}, {"a", ""}} {
		if m, err := c.ObtainAll(context.Background(), set); m != nil || !errors.Is(err, fencelock.ErrInvalid) {
			t.Fatalf("ObtainAll(%q): %v, %v; want ErrInvalid", set, m, err)
		}
	}
	if info, err := c.Inspect(context.Background(), "a"); err != nil || info.Held {
		t.Fatalf("a after a bad set: %+v, %v", info, err)
	}
	var m *fencelock.MultiLock
	if err := m.Release(context.Background()); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("a nil set's release: %v", err)
	}
}

func names(locks []*fencelock.Lock) []string {
	out := make([]string, len(locks))
	for i, l := range locks {
		out[i] = fmt.Sprint(l.Name())
	}
	return out
}

// A wait timeout given as a Client default bounds the whole ObtainAll too, not each name's
// wait: b comes free after 700 ms and c never, so a per-name bound would return at 1.7 s.
func TestObtainAllDefaultWaitTimeoutBoundsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a := fencelock.New(store.Backend(), fencelock.WithDefaults(fencelock.WithWaitTimeout(time.Second)))
		other := fencelock.New(store.Backend())
		defer a.Close()
		defer other.Close()
		ctx := t.Context()
		b, err := other.Obtain(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		c, err := other.Obtain(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release(context.Background())
		go func() {
			time.Sleep(700 * time.Millisecond)
			_ = b.Release(context.Background())
		}()
		start := time.Now()
		if _, err := a.ObtainAll(ctx, []string{"a", "b", "c"}); !errors.Is(err, fencelock.ErrNotObtained) {
			t.Fatalf("ObtainAll past its default wait timeout: %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("ObtainAll with a 1 s default wait timeout returned after %v", took)
		}
	})
}
