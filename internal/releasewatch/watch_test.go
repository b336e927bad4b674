package releasewatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// Join registers a waiter only on a channel that is subscribed and acknowledged already: it
// sends no subscription of its own, and a waiter that joined hears the next message.
func TestJoinOnlyWhereSubscribed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := testserver.StartRedis(t).ClientT(t)
	s := releasewatch.New(redisconn.GoRedis(c), false)
	defer s.Close()

	w := releasewatch.NewWaiter()
	if s.Join("ch", w) {
		t.Fatal("Join on a channel nobody subscribed")
	}
	first := releasewatch.NewWaiter()
	ready, err := s.Add(ctx, "ch", first)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("subscription never acknowledged")
	}
	if !s.Join("ch", w) {
		t.Fatal("Join on a subscribed channel")
	}
	s.Remove("ch", first)
	if err := c.Publish(ctx, "ch", "released").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Wake:
	case <-ctx.Done():
		t.Fatal("the waiter that joined never woke")
	}

	// The channel lingers after its last waiter leaves, and a waiter can join it then.
	s.Remove("ch", w)
	if !s.Join("ch", w) {
		t.Fatal("Join on a lingering channel")
	}
	s.Remove("ch", w)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.PubSubNumSub(ctx, "ch").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n["ch"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an idle channel was never unsubscribed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.Join("ch", w) {
		t.Fatal("Join on an unsubscribed channel")
	}
}
