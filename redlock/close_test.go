package redlock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redlock"
)

// Close is final: the calls in flight when it is called finish before it returns, every call
// made after it fails with an error matching fencelock.ErrClosed, and no goroutine of the
// Backend outlives it, also when two Closes run at once.
func TestCloseIsFinal(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	clients := dial(t, addrs)
	ignore := goleak.IgnoreCurrent()
	for round := range 40 {
		b := redlock.New(clients, redlock.WithNodeTimeout(300*time.Millisecond))
		name := fmt.Sprintf("%s-%d", t.Name(), round)
		var closed atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		loop := func(op string, call func() error) {
			wg.Go(func() {
				for {
					after := closed.Load()
					err := call()
					if errors.Is(err, fencelock.ErrClosed) {
						return
					}
					if after {
						errs <- fmt.Errorf("%s after Close: %v, want ErrClosed", op, err)
						return
					}
				}
			})
		}
		for k := range 2 {
			owner := fmt.Sprint("owner-", k)
			loop("acquire", func() error {
				req := driver.Request{Name: name, Owner: owner, TTL: time.Second}
				if _, err := b.Acquire(ctx, req); err != nil {
					return err
				}
				_, err := b.Release(ctx, driver.Lease{Name: name, Owner: owner, TTL: time.Second}, "")
				return err
			})
		}
		loop("watch", func() error {
			_, stop, err := b.WatchRelease(ctx, name)
			if err == nil {
				stop()
			}
			return err
		})
		loop("renew", func() error {
			return b.Renew(ctx, []driver.Lease{{Name: name, Owner: "owner-0", TTL: time.Second}})[0].Err
		})
		loop("inspect", func() error {
			_, err := b.Inspect(ctx, name)
			return err
		})
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		var closers sync.WaitGroup
		for range 2 { // every Close returns once the Backend is closed
			closers.Go(func() {
				if err := b.Close(); err != nil {
					t.Error(err)
				}
				closed.Store(true)
			})
		}
		closers.Wait()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if err := goleak.Find(ignore); err != nil {
			t.Fatalf("round %d: goroutines left after Close: %v", round, err)
		}
	}
}

// An acquisition under way when Close begins runs to its end: here its grant needs a token
// round after Close began. Cut off there, it would leave the lock on every node that granted
// it, held for no one until the TTL ends, and the caller could not release it.
func TestCloseWaitsForAnAcquisitionUnderWay(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	_, as := startNodes(t, 3)
	clients, direct := dial(t, as), dial(t, as)
	late := []*sendLate{{}, {}}
	clients[1].(*redis.Client).AddHook(late[0])
	clients[2].(*redis.Client).AddHook(late[1])
	b := redlock.New(clients, redlock.WithNodeTimeout(2*time.Second))
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Inspect(ctx, "under-way"); err != nil { // identifies the nodes, loads inspect.lua
		t.Fatal(err)
	}
	key := b.Key("under-way")
	ahead := time.Now().UnixMicro() + 1e12 // above every proposal: the token takes a round
	for _, c := range direct {
		if err := c.(*redis.Client).Set(ctx, key+":fence", ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range late {
		l.hold(300 * time.Millisecond)
	}
	req := driver.Request{Name: "under-way", Owner: "o", TTL: 10 * time.Second}
	type result struct {
		g   driver.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := b.Acquire(ctx, req)
		done <- result{g, err}
	}()
	waitFor(t, 10*time.Second, "the acquire calls to nodes 1 and 2 held back", func() bool {
		return late[0].toCome() == 0 && late[1].toCome() == 0
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	got := owners(direct, key)
	if r.err != nil && !slices.Equal(got, make([]string, 3)) {
		t.Fatalf("the acquisition failed (%v) and left the lock on the nodes: owners %q", r.err, got)
	}
	if r.err == nil && r.g.Token <= ahead {
		t.Fatalf("grant %+v: token not above the counters %d", r.g, ahead)
	}
	if _, err := b.Acquire(ctx, req); !errors.Is(err, fencelock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
}
