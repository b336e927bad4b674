package fencelock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// events collects a Client's events, and lets a test wait for one of a kind.
type events struct {
	mu  sync.Mutex
	all []fencelock.Event
	ch  chan fencelock.Event
}

func newEvents() *events { return &events{ch: make(chan fencelock.Event, 1024)} }

func (r *events) observe(e fencelock.Event) {
	r.mu.Lock()
	r.all = append(r.all, e)
	r.mu.Unlock()
	select {
	case r.ch <- e:
	default:
	}
}

// next waits for the next event of kind about name; the bound only fails a test that would
// otherwise hang.
func (r *events) next(t *testing.T, kind fencelock.EventKind, name string) fencelock.Event {
	t.Helper()
	bound := time.After(20 * time.Second)
	for {
		select {
		case e := <-r.ch:
			if e.Kind == kind && e.Name == name {
				return e
			}
		case <-bound:
			t.Fatalf("no %v event for %q", kind, name)
		}
	}
}

func (r *events) count(kind fencelock.EventKind, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.all {
		if e.Kind == kind && e.Name == name {
			n++
		}
	}
	return n
}

// syncBuffer is a log's destination that a test reads while the Client writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// unreachable returns a Client whose Redis is behind a proxy the test cuts (every connection
// reset, new ones refused), with opts.
func unreachable(t *testing.T, opts ...fencelock.ClientOption) (*fencelock.Client, *testserver.Proxy) {
	t.Helper()
	proxy := testserver.StartProxy(t, single.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c, proxy
}

// A store out of reach was silent: Obtain, a semaphore's Acquire and Lead waited without an
// event or a log line, and one with a deadline failed at it as a timeout. Now the first failed
// attempt of each call is told (EventUnavailable, a warning in the log), its return to reach
// (EventAvailable), and a call whose context ends while its attempts fail on the store returns
// an error that matches ErrUnavailable beside the context's, with the outcome "unavailable".
func TestUnavailableStoreIsTold(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)

	t.Run("obtain waits, told, then reached again", func(t *testing.T) {
		ev := newEvents()
		c, proxy := unreachable(t, fencelock.WithObserver(ev.observe))
		name := lockName(t)
		proxy.Cut()
		got := make(chan error, 1)
		go func() {
			l, err := c.Obtain(ctx, name) // no deadline of its own, as the README's snippets
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		e := ev.next(t, fencelock.EventUnavailable, name)
		if !errors.Is(e.Err, fencelock.ErrUnavailable) || e.Attempts != 1 || e.Context == nil {
			t.Fatalf("EventUnavailable: err %v, attempts %d, context %v", e.Err, e.Attempts, e.Context)
		}
		proxy.Restore()
		ev.next(t, fencelock.EventAvailable, name)
		if err := <-got; err != nil {
			t.Fatalf("Obtain after the store came back: %v", err)
		}
	})

	t.Run("told again while it keeps failing, no sooner", func(t *testing.T) {
		ev := newEvents()
		var clock skewClock
		c, proxy := unreachable(t, fencelock.WithObserver(ev.observe), fencelock.WithClock(clock.now))
		name := lockName(t)
		proxy.Cut()
		call, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			// WithRetry, whose waits tell EventWaited, so that the test sees attempts made.
			_, err := c.Obtain(call, name, fencelock.WithRetry(fencelock.LinearBackoff(10*time.Millisecond)))
			got <- err
		}()
		ev.next(t, fencelock.EventUnavailable, name)
		// Failed attempts go on, unsaid, until the Client's clock has moved UnavailableEvery.
		ev.next(t, fencelock.EventWaited, name)
		ev.next(t, fencelock.EventWaited, name)
		if n := ev.count(fencelock.EventUnavailable, name); n != 1 {
			t.Fatalf("%d EventUnavailable before %v passed", n, fencelock.UnavailableEvery)
		}
		clock.advance(fencelock.UnavailableEvery)
		if e := ev.next(t, fencelock.EventUnavailable, name); e.Attempts < 2 || e.Duration < fencelock.UnavailableEvery {
			t.Fatalf("the second EventUnavailable: %d attempts over %v; want those since the first (2 or more), over %v or more", e.Attempts, e.Duration, fencelock.UnavailableEvery)
		}
		cancel()
		if err := <-got; !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Obtain cancelled on a cut store: %v", err)
		}
	})

	t.Run("a deadline on a store out of reach is unavailable, not timeout", func(t *testing.T) {
		ev := newEvents()
		c, proxy := unreachable(t, fencelock.WithObserver(ev.observe))
		name := lockName(t)
		proxy.Cut()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := c.Obtain(short, name)
		for _, want := range []error{fencelock.ErrUnavailable, fencelock.ErrNotObtained, context.DeadlineExceeded} {
			if !errors.Is(err, want) {
				t.Errorf("Obtain on a cut store, past its deadline: %v; want it to match %v", err, want)
			}
		}
		if e := ev.next(t, fencelock.EventNotObtained, name); e.Outcome() != "unavailable" {
			t.Fatalf("outcome %q of %v, want unavailable", e.Outcome(), e.Err)
		}
		if ev.count(fencelock.EventUnavailable, name) != 1 {
			t.Fatalf("%d EventUnavailable within one call's first %v", ev.count(fencelock.EventUnavailable, name), fencelock.UnavailableEvery)
		}
		// TryObtain's one attempt too.
		_, err = c.TryObtain(ctx, name)
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("TryObtain on a cut store: %v", err)
		}
		if e := ev.next(t, fencelock.EventNotObtained, name); e.Outcome() != "unavailable" {
			t.Fatalf("TryObtain's outcome %q, want unavailable", e.Outcome())
		}
	})

	t.Run("a held lock stays held and timeout", func(t *testing.T) {
		ev := newEvents()
		c, _ := unreachable(t, fencelock.WithObserver(ev.observe))
		name := lockName(t)
		holder := newLocker(t, singleClient(t))
		held, err := holder.Obtain(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		if _, err := c.TryObtain(ctx, name); err == nil || errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("TryObtain of a held lock: %v", err)
		}
		if e := ev.next(t, fencelock.EventNotObtained, name); e.Outcome() != "held" {
			t.Fatalf("TryObtain of a held lock: outcome %q", e.Outcome())
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = c.Obtain(short, name)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrNotObtained) || errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("Obtain of a held lock past its deadline: %v", err)
		}
		if e := ev.next(t, fencelock.EventNotObtained, name); e.Outcome() != "timeout" {
			t.Fatalf("Obtain of a held lock: outcome %q", e.Outcome())
		}
		if n := ev.count(fencelock.EventUnavailable, name); n != 0 {
			t.Fatalf("%d EventUnavailable with the store in reach", n)
		}
	})

	t.Run("semaphore", func(t *testing.T) {
		ev := newEvents()
		c, proxy := unreachable(t, fencelock.WithObserver(ev.observe))
		name := lockName(t)
		proxy.Cut()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := c.Semaphore(name, 2).Acquire(short)
		if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire on a cut store: %v", err)
		}
		ev.next(t, fencelock.EventUnavailable, name)
	})

	t.Run("lead", func(t *testing.T) {
		ev := newEvents()
		c, proxy := unreachable(t, fencelock.WithObserver(ev.observe))
		name := lockName(t)
		proxy.Cut()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		err := c.Election(name).Lead(short, "me", func(context.Context, int64) error {
			t.Error("led on a cut store")
			return nil
		})
		if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lead on a cut store: %v", err)
		}
		ev.next(t, fencelock.EventUnavailable, name)
	})

	t.Run("logged", func(t *testing.T) {
		var log syncBuffer
		c, proxy := unreachable(t, fencelock.WithLogger(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo})))
		name := lockName(t)
		proxy.Cut()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := c.Obtain(short, name); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("Obtain on a cut store: %v", err)
		}
		line := ""
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "fencelock: unavailable") {
				line = l
			}
		}
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "lock="+name) || !strings.Contains(line, "attempts=1") {
			t.Fatalf("no warning of the store out of reach at info level; the log:\n%s", log.String())
		}
	})
}
