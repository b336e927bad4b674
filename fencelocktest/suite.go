// Package fencelocktest is the conformance suite every fencelock backend passes: the same
// Obtain, TryObtain, Do, Release, Token and Context semantics, checked against a real store.
// A backend's tests call Run with a Target that connects to a server the test started.
package fencelocktest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

// Target describes the backend under test.
type Target struct {
	// New returns a backend connected to the store. Each call is a separate client, as another
	// process would be; the test closes what it opened with t.Cleanup.
	New func(t *testing.T) fencelock.Backend
	// TTL is the TTL the suite locks with: short, but at least the backend's minimum.
	TTL time.Duration
	// Drop removes the lock name from the store behind its holder's back, as an operator, an
	// eviction or an expired session would.
	Drop func(t *testing.T, name string)
	// DropPermit removes owner's permit of the semaphore name from the store behind its
	// holder's back; the semaphore suite skips what needs it when it is nil.
	DropPermit func(t *testing.T, name, owner string)
	// NoRemaining says Inspect reports no time left for a holder (Info.Remaining is zero): the
	// store keeps a hold as long as its client's session, which it does not time (ZooKeeper).
	NoRemaining bool
}

// remainingOK says whether a holder's Info.Remaining is what the backend can report: within
// the TTL, or zero when it reports none.
func (s suite) remainingOK(left time.Duration) bool {
	if s.NoRemaining {
		return left == 0
	}
	return left > 0 && left <= s.TTL
}

// Run runs the suite as subtests of t.
func Run(t *testing.T, target Target) {
	s := suite{Target: target}
	t.Run("TryObtainFailsWhileHeld", s.tryObtainFailsWhileHeld)
	t.Run("WatchdogKeepsLock", s.watchdogKeepsLock)
	t.Run("ObtainWaitsForRelease", s.obtainWaitsForRelease)
	t.Run("ObtainContextEnds", s.obtainContextEnds)
	t.Run("WaiterToldOfHandover", s.waiterToldOfHandover)
	t.Run("VerifyAsksTheStore", s.verifyAsksTheStore)
	t.Run("ErrorsReadWell", s.errorsReadWell)
	t.Run("Do", s.do)
	t.Run("ReleaseNilOrTwice", s.releaseNilOrTwice)
	t.Run("ReleaseAfterLossLeavesNewHolder", s.releaseAfterLossLeavesNewHolder)
	t.Run("StaleReleaseLeavesTheOwnersNextLock", s.staleReleaseLeavesTheOwnersNextLock)
	t.Run("LossCancelsContext", s.lossCancelsContext)
	t.Run("ReentrantThroughContext", s.reentrantThroughContext)
	t.Run("ReentrantWithOwner", s.reentrantWithOwner)
	t.Run("TokensIncrease", s.tokensIncrease)
	t.Run("Inspect", s.inspect)
	t.Run("BadInput", s.badInput)
	t.Run("CloseReleases", s.closeReleases)
	t.Run("CloseWhileWaiting", s.closeWhileWaiting)
	t.Run("ContextEndsInFlight", s.contextEndsInFlight)
	t.Run("OneOwnerWaitsTwice", s.oneOwnerWaitsTwice)
	t.Run("SharedOwnerBesideAnother", s.sharedOwnerBesideAnother)
	t.Run("MaxHold", s.maxHold)
	t.Run("MinHold", s.minHold)
	t.Run("ObtainAll", s.obtainAll)
	t.Run("LockDelay", s.lockDelay)
}

type suite struct{ Target }

var seq atomic.Int64

// name returns a lock name unique to this run.
func (s suite) name(t *testing.T) string {
	return "conformance-" + time.Now().Format("150405") + "-" + itoa(seq.Add(1))
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

func (s suite) client(t *testing.T, opts ...fencelock.ClientOption) *fencelock.Client {
	c := fencelock.New(s.New(t), append([]fencelock.ClientOption{fencelock.WithDefaults(fencelock.WithTTL(s.TTL))}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitingClient is a Client of the backend that tells each EventWaiting on waits, dropping
// what does not fit: a test learns that a call of its waits behind another holder.
func (s suite) waitingClient(t *testing.T, waits chan<- struct{}) *fencelock.Client {
	return s.client(t, fencelock.WithObserver(func(e fencelock.Event) {
		if e.Kind == fencelock.EventWaiting {
			select {
			case waits <- struct{}{}:
			default:
			}
		}
	}))
}

func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s suite) tryObtainFailsWhileHeld(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	a, b := s.client(t), s.client(t)
	name := s.name(t)
	first, err := a.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("TryObtain of a held lock: %v, want ErrNotObtained", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := b.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("TryObtain after release: %v", err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Work that runs several TTLs keeps the lock.
func (s suite) watchdogKeepsLock(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	c, other := s.client(t), s.client(t)
	name := s.name(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * s.TTL)
	if err := lock.Context().Err(); err != nil {
		t.Fatalf("lost after 3 TTLs: %v", err)
	}
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client got the lock: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter gets the lock when it is released, long before the holder's TTL would run out.
func (s suite) obtainWaitsForRelease(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	holder, waiter := s.client(t), s.client(t)
	name := s.name(t)
	lock, err := holder.Obtain(ctx, name, fencelock.WithTTL(max(s.TTL, 60*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var obtained atomic.Bool
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := waiter.Obtain(wctx, name)
		if err == nil {
			obtained.Store(true)
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if obtained.Load() {
		t.Fatal("the waiter obtained a held lock")
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func (s suite) obtainContextEnds(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	holder, waiter := s.client(t), s.client(t)
	name := s.name(t)
	lock, err := holder.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = waiter.Obtain(short, name)
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
}

func (s suite) do(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	c := s.client(t)
	name := s.name(t)
	ran := false
	err := c.Do(ctx, name, func(lctx context.Context) error {
		ran = true
		if err := lctx.Err(); err != nil {
			return err
		}
		info, err := c.Inspect(ctx, name)
		if err != nil {
			return err
		}
		if !info.Held {
			return errors.New("not held inside Do")
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: ran %v, %v", ran, err)
	}
	if info, err := c.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("after Do: %+v %v", info, err)
	}
	boom := errors.New("boom")
	if err := c.Do(ctx, name, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
}

func (s suite) releaseNilOrTwice(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	var nilLock *fencelock.Lock
	if err := nilLock.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("nil lock: %v", err)
	}
	lock, err := s.client(t).Obtain(ctx, s.name(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("second release: %v", err)
	}
	if !errors.Is(lock.Context().Err(), context.Canceled) {
		t.Fatalf("context after release: %v", lock.Context().Err())
	}
}

// A holder whose lock was dropped and taken by another must not release the other's lock.
func (s suite) releaseAfterLossLeavesNewHolder(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	a, b := s.client(t), s.client(t)
	name := s.name(t)
	stale, err := a.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	s.Drop(t, name)
	fresh, err := b.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("stale release: %v, want ErrNotHeld", err)
	}
	info, err := b.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Token != fresh.Token() {
		t.Fatalf("the new holder's lock was touched: %+v (token %d)", info, fresh.Token())
	}
	if err := fresh.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A dropped lock ends its holder's context within a renewal interval, and the callback is
// told.
func (s suite) lossCancelsContext(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	c := s.client(t)
	name := s.name(t)
	told := make(chan error, 1)
	lock, err := c.Obtain(ctx, name, fencelock.WithOnLost(func(_ string, err error) { told <- err }))
	if err != nil {
		t.Fatal(err)
	}
	s.Drop(t, name)
	select {
	case <-lock.Context().Done():
	case <-time.After(s.TTL + 5*time.Second):
		t.Fatal("context still alive after the lock was dropped")
	}
	if err := lock.Context().Err(); !errors.Is(err, fencelock.ErrLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("context error %v", err)
	}
	if err := <-told; !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("callback told %v", err)
	}
	_ = lock.Release(ctx)
}

func (s suite) reentrantThroughContext(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	c := s.client(t)
	name := s.name(t)
	outer, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryObtain(outer.Context(), name)
	if err != nil {
		t.Fatalf("reentrant TryObtain: %v", err)
	}
	if inner.HoldCount() != 2 || inner.Token() != outer.Token() {
		t.Fatalf("inner: count %d, token %d vs %d", inner.HoldCount(), inner.Token(), outer.Token())
	}
	if info, _ := c.Inspect(ctx, name); info.Count != 2 {
		t.Fatalf("hold count in the store %d, want 2", info.Count)
	}
	if _, err := c.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another owner got in: %v", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Inspect(ctx, name); !info.Held || info.Count != 1 {
		t.Fatalf("after the inner release: %+v", info)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Inspect(ctx, name); info.Held {
		t.Fatalf("held after the last release: %+v", info)
	}
}

func (s suite) reentrantWithOwner(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	c1, c2 := s.client(t), s.client(t)
	name := s.name(t)
	l1, err := c1.Obtain(ctx, name, fencelock.WithOwner("conformance-owner"))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c2.TryObtain(ctx, name, fencelock.WithOwner("conformance-owner"))
	if err != nil {
		t.Fatalf("same owner, another client: %v", err)
	}
	if l2.HoldCount() != 2 || l2.Token() != l1.Token() {
		t.Fatalf("count %d, tokens %d %d", l2.HoldCount(), l1.Token(), l2.Token())
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := c1.Inspect(ctx, name); info.Held {
		t.Fatalf("held after both releases: %+v", info)
	}
}

func (s suite) tokensIncrease(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	a, b := s.client(t), s.client(t)
	name := s.name(t)
	var last int64
	for i := 0; i < 10; i++ {
		c := a
		if i%2 == 1 {
			c = b
		}
		lock, err := c.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if lock.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, lock.Token(), last)
		}
		last = lock.Token()
		if i == 5 {
			// A dropped lock's successor still gets a greater token.
			s.Drop(t, name)
			<-lock.Context().Done()
		}
		_ = lock.Release(ctx)
	}
}

func (s suite) inspect(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	c := s.client(t)
	name := s.name(t)
	if info, err := c.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("a never-used lock: %+v %v", info, err)
	}
	const meta = `{"host":"conformance","pid":42}`
	lock, err := c.Obtain(ctx, name, fencelock.WithMetadata(meta))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil || !info.Held || info.Owner != lock.Owner() || info.Token != lock.Token() || info.Count != 1 || info.Meta != meta {
		t.Fatalf("held: %+v %v", info, err)
	}
	_ = lock.Release(ctx)
	if info, err := c.Inspect(ctx, name); err != nil || info.Held || info.Meta != "" {
		t.Fatalf("after release: %+v %v", info, err)
	}
}

func (s suite) badInput(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	c := s.client(t)
	for _, tc := range []struct {
		what string
		name string
		opts []fencelock.Option
	}{
		{"empty name", "", nil},
		{"zero TTL", s.name(t), []fencelock.Option{fencelock.WithTTL(0)}},
		{"negative TTL", s.name(t), []fencelock.Option{fencelock.WithTTL(-time.Second)}},
		{"renewal interval too long", s.name(t), []fencelock.Option{fencelock.WithRenewInterval(s.TTL)}},
		{"metadata too long", s.name(t), []fencelock.Option{fencelock.WithMetadata(string(make([]byte, fencelock.MaxMetadata+1)))}},
	} {
		if _, err := c.TryObtain(ctx, tc.name, tc.opts...); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.what, err)
		}
	}
}

// waiterToldOfHandover: the observer is told once that a waiter begins to wait, and its grant
// says it waited and was handed the lock; a free lock's grant says neither.
func (s suite) waiterToldOfHandover(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	var mu sync.Mutex
	var waits, obtained []fencelock.Event
	c := s.client(t, fencelock.WithObserver(func(e fencelock.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case fencelock.EventWaiting:
			waits = append(waits, e)
		case fencelock.EventObtained:
			obtained = append(obtained, e)
		}
	}))
	free, err := c.Obtain(ctx, name+"-free")
	if err != nil {
		t.Fatal(err)
	}
	_ = free.Release(ctx)
	holder, err := s.client(t).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := c.Obtain(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(waits)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no EventWaiting while the lock was held")
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	_ = l.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 1 || waits[0].Name != name {
		t.Fatalf("EventWaiting: %d, of %v; want one, of the waiter", len(waits), waits)
	}
	if len(obtained) != 2 {
		t.Fatalf("%d EventObtained, want 2", len(obtained))
	}
	if e := obtained[0]; e.Waited || e.Handover {
		t.Fatalf("the free lock's grant: Waited %v, Handover %v; want neither", e.Waited, e.Handover)
	}
	if e := obtained[1]; !e.Waited || !e.Handover || e.Token != l.Token() {
		t.Fatalf("the waiter's grant: Waited %v, Handover %v, token %d (lock %d); want both", e.Waited, e.Handover, e.Token, l.Token())
	}
}

// verifyAsksTheStore: Verify is nil while the store holds the lock for its holder, and, once
// the lock is gone from the store behind the holder's back, says it is lost and ends its
// context, though the holder's own deadline has not passed.
func (s suite) verifyAsksTheStore(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	lock, err := s.client(t).Obtain(ctx, name, fencelock.WithTTL(max(s.TTL, 5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	if err := lock.Verify(ctx); err != nil {
		t.Fatalf("Verify of a held lock: %v", err)
	}
	s.Drop(t, name)
	err = lock.Verify(ctx)
	if !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Verify of a lock gone from the store: %v, want ErrLost", err)
	}
	select {
	case <-lock.Context().Done():
	default:
		t.Fatal("Verify found the lock gone, and its context goes on")
	}
	if err := lock.Verify(ctx); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Verify again: %v, want ErrLost", err)
	}
}

// internals finds what an error text must not show its reader: a Go type, a formatting slip, a
// script's SHA or line.
var internals = regexp.MustCompile(`\(\*|\*[a-z]+\.[A-Z]|struct \{|%!|<nil>|[0-9a-f]{40}|@user_script`)

// ShowsInternals reports whether an error text shows its reader what it must not: a Go type,
// a formatting slip, a script's SHA or line. Error-text tables elsewhere hold texts to it too.
func ShowsInternals(text string) bool { return internals.MatchString(text) }

// errorsReadWell: the errors of bad input, of a lock held elsewhere, of a release of what is
// not held and of a closed backend, through the Client and straight from the backend, are one
// line each, say they are fencelock's, show no Go type, and match the sentinel they stand for
// (a closed backend's ErrClosed, not ErrUnavailable, which a caller would retry).
func (s suite) errorsReadWell(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	name := s.name(t)
	b := s.New(t)
	c := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(s.TTL)))
	t.Cleanup(func() { _ = c.Close() })
	held, err := s.client(t).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	lease := driver.Lease{Name: name + "-never", Owner: "nobody", TTL: s.TTL}
	for _, tc := range []struct {
		what string
		err  func() error
		want error
	}{
		{"Obtain with an empty name", func() error { _, err := c.Obtain(ctx, ""); return err }, fencelock.ErrInvalid},
		{"Obtain with a zero TTL", func() error { _, err := c.Obtain(ctx, name, fencelock.WithTTL(0)); return err }, fencelock.ErrInvalid},
		{"TryObtain of a held lock", func() error { _, err := c.TryObtain(ctx, name); return err }, fencelock.ErrNotObtained},
		{"Acquire with an empty name", func() error {
			_, err := b.Acquire(ctx, driver.Request{Name: "", Owner: "o", TTL: s.TTL})
			return err
		}, fencelock.ErrInvalid},
		{"Inspect with an empty name", func() error { _, err := b.Inspect(ctx, ""); return err }, fencelock.ErrInvalid},
		{"Release of what is not held", func() error { _, err := b.Release(ctx, lease, "h"); return err }, fencelock.ErrNotHeld},
		{"Acquire on a closed backend", func() error {
			closed := s.New(t)
			if cl, ok := closed.(interface{ Close() error }); ok {
				_ = cl.Close()
			}
			_, err := closed.Acquire(ctx, driver.Request{Name: name, Owner: "o", TTL: s.TTL})
			if err == nil {
				return errors.New("fencelock: a closed backend granted a lock") // no Close, or it still grants
			}
			return err
		}, fencelock.ErrClosed},
	} {
		err := tc.err()
		switch text := ""; {
		case err == nil:
			t.Errorf("%s: no error", tc.what)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		default:
			text = err.Error()
			t.Logf("%s: %s", tc.what, text)
			if strings.Contains(text, "\n") || internals.MatchString(text) || !strings.Contains(text, "fencelock") {
				t.Errorf("%s: the text %q spans lines, shows internals or does not say it is fencelock's", tc.what, text)
			}
		}
	}
}
