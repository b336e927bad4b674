package releasewatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// Close is final: it ends every subscription and waits until the Set's goroutines are gone;
// afterwards Add fails with ErrClosed and starts nothing, and Join joins nothing.
func TestCloseIsFinal(t *testing.T) {
	r := testserver.StartRedis(t)
	c := r.ClientT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := goleak.IgnoreCurrent()

	s := releasewatch.New(redisconn.GoRedis(c), false)
	w := releasewatch.NewWaiter()
	ready, err := s.Add(ctx, "a", w)
	if err != nil {
		t.Fatal(err)
	}
	await(t, ready, 10*time.Second, "subscription")
	if _, err := s.Add(ctx, "b", w); err != nil { // on its way when Close comes
		t.Fatal(err)
	}
	s.Remove("a", w) // lingering when Close comes

	s.Close()
	if left := goroutinesAfterClose(); left != "" {
		t.Fatalf("goroutines left when Close returned:\n%s", left)
	}
	ready, err = s.Add(ctx, "a", w)
	if !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("Add after Close = %v, want an error matching ErrClosed and fencelock.ErrClosed", err)
	}
	if ready != nil {
		t.Fatal("Add after Close returned a ready channel")
	}
	if s.Join("a", w) {
		t.Fatal("Join after Close joined")
	}
	s.Remove("a", w)
	s.Close() // again: nothing to do
	if left := goroutinesAfterClose(); left != "" {
		t.Fatalf("goroutines started after Close:\n%s", left)
	}
	for _, ch := range []string{"a", "b"} {
		awaitNumSub(t, ctx, c, ch, false, 0)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatal(err)
	}
}

// Close ends a Set whose server does not answer (SIGSTOP) within the send timeout, and
// leaves no goroutine behind: with a connection made before, and with one being made. Like
// every test that looks at the goroutines as Close returns, it does not run in parallel: it
// would see the other tests' Sets.
func TestCloseWhileTheServerIsStopped(t *testing.T) {
	for _, connected := range []bool{true, false} {
		t.Run(map[bool]string{true: "connected", false: "connecting"}[connected], func(t *testing.T) {
			r := testserver.StartRedis(t)
			c := r.ClientT(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s := releasewatch.New(redisconn.GoRedis(c), false)
			w := releasewatch.NewWaiter()
			if connected {
				ready, err := s.Add(ctx, "a", w)
				if err != nil {
					t.Fatal(err)
				}
				await(t, ready, 10*time.Second, "subscription")
			}
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Resume() }()
			if _, err := s.Add(ctx, "b", w); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the subscription is on its way
			closed := make(chan struct{})
			go func() { s.Close(); close(closed) }()
			await(t, closed, 20*time.Second, "Close while the server is stopped")
			if left := goroutinesAfterClose(); left != "" {
				t.Fatalf("goroutines left when Close returned:\n%s", left)
			}
		})
	}
}
