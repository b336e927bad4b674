package releasewatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/releasewatch"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// A subscription that hangs on a stopped Cluster node holds up no message from another node:
// a release on a healthy node wakes its waiter while the subscription to the stopped one
// waits for an answer for as long as the client's timeouts allow (a minute here).
func TestDispatchDoesNotWaitForASubscription(t *testing.T) {
	t.Parallel()
	cl := testserver.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	healthy, stopped, node := onTwoNodes(t, ctx, cl, c, "stall")

	s := releasewatch.New(redisconn.GoRedis(c), true)
	defer s.Close()
	w := releasewatch.NewWaiter()
	ready, err := s.Add(ctx, healthy, w)
	if err != nil {
		t.Fatal(err)
	}
	await(t, ready, 10*time.Second, "subscription to the healthy node")
	// go-redis's ClusterClient learns the commands' key positions (COMMAND) from a node it
	// picks at random, at the first command that needs them: this SPUBLISH, to a channel no
	// one listens on, has it learn them now, not from the stopped node at the SPUBLISH below,
	// which then waits out the one-minute read timeout.
	if err := c.SPublish(ctx, stopped, "before the pause").Err(); err != nil {
		t.Fatal(err)
	}

	if err := node.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = node.Resume() }() // before Close, which waits for the hanging subscription
	added := make(chan struct{})
	var stoppedReady <-chan struct{}
	go func() {
		defer close(added)
		stoppedReady, _ = s.Add(ctx, stopped, releasewatch.NewWaiter())
	}()
	time.Sleep(300 * time.Millisecond) // the subscription to the stopped node is on its way
	if err := c.SPublish(ctx, healthy, "released").Err(); err != nil {
		t.Fatal(err)
	}
	await(t, w.Wake, 10*time.Second, "release on a healthy node while a subscription hangs on a stopped one")
	await(t, added, 10*time.Second, "Add of a channel on the stopped node")

	if err := node.Resume(); err != nil {
		t.Fatal(err)
	}
	await(t, stoppedReady, 70*time.Second, "subscription to the node once it answers again")
}

// onTwoNodes returns two channel names whose slots two different masters serve, and the
// master of the second.
func onTwoNodes(t *testing.T, ctx context.Context, cl *testserver.Cluster, c *redis.ClusterClient, prefix string) (string, string, *testserver.Redis) {
	t.Helper()
	first := prefix + "-a"
	m, err := c.MasterForKey(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		second := fmt.Sprintf("%s-b%d", prefix, i)
		m2, err := c.MasterForKey(ctx, second)
		if err != nil {
			t.Fatal(err)
		}
		if m2.Options().Addr == m.Options().Addr {
			continue
		}
		for _, n := range cl.Nodes {
			if n.Addr == m2.Options().Addr {
				return first, second, n
			}
		}
		t.Fatalf("no node has address %s", m2.Options().Addr)
	}
	t.Fatal("every channel name landed on one node")
	return "", "", nil
}

// While the server does not answer, Add, Join and Remove return at once: none of them waits
// for a subscription to be sent. The subscriptions asked for meanwhile are taken once it
// answers again.
func TestCallsDoNotWaitForTheServer(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	p := testserver.StartProxy(t, r.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := releasewatch.New(redisconn.GoRedis(c), false)
	defer s.Close()
	defer p.Restore() // before Close, which waits for a subscription still on its way

	p.Blackhole()
	first, other := releasewatch.NewWaiter(), releasewatch.NewWaiter()
	done := make(chan struct{})
	var readyA, readyB <-chan struct{}
	go func() {
		defer close(done)
		readyA, _ = s.Add(ctx, "a", first)
		s.Join("a", other)
		readyB, _ = s.Add(ctx, "b", other)
		s.Remove("a", other)
	}()
	await(t, done, 10*time.Second, "Add, Join and Remove while the server does not answer")

	p.Restore()
	await(t, readyA, 70*time.Second, "subscription to a once the server answers")
	await(t, readyB, 10*time.Second, "subscription to b once the server answers")
	if err := r.Client().Publish(ctx, "a", "released").Err(); err != nil {
		t.Fatal(err)
	}
	await(t, first.Wake, 10*time.Second, "release on a")
}
