package releasewatch_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// Once Remove returned, its waiter hears no more messages, though they stream in while
// waiters come and go.
func TestNoMessageAfterRemove(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	c := r.ClientT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := releasewatch.New(redisconn.GoRedis(c), false)
	defer s.Close()
	const ch = "stream"
	keeper := releasewatch.NewWaiter() // keeps the channel subscribed throughout
	ready, err := s.Add(ctx, ch, keeper)
	if err != nil {
		t.Fatal(err)
	}
	await(t, ready, 10*time.Second, "subscription")

	stop := make(chan struct{})
	var publisher sync.WaitGroup
	publisher.Add(1)
	go func() {
		defer publisher.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.Publish(ctx, ch, "m").Err()
		}
	}()
	var late atomic.Int64
	var waiters sync.WaitGroup
	for g := 0; g < 4; g++ {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			for i := 0; i < 50; i++ {
				var removed atomic.Bool
				heard := make(chan struct{}, 1)
				w := releasewatch.NewWaiter()
				w.Message = func(string) bool {
					if removed.Load() {
						late.Add(1)
					}
					select {
					case heard <- struct{}{}:
					default:
					}
					return true
				}
				if !s.Join(ch, w) {
					t.Error("Join on a subscribed channel")
					return
				}
				select {
				case <-heard:
				case <-ctx.Done():
					t.Error("a joined waiter heard nothing")
					return
				}
				s.Remove(ch, w)
				removed.Store(true)
			}
		}()
	}
	waiters.Wait()
	// Messages published after the last Remove reach the keeper: the ones before them have
	// been dispatched too.
	for range 2 {
		drain(keeper.Wake)
		await(t, keeper.Wake, 10*time.Second, "message to the keeper")
	}
	close(stop)
	publisher.Wait()
	if n := late.Load(); n > 0 {
		t.Fatalf("%d messages reached waiters after Remove returned", n)
	}
}
