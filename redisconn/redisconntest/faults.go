package redisconntest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// servers are the processes of a Deployment, which the fault cases stop, restart and reshard.
type servers struct {
	single   *testserver.Redis
	cluster  *testserver.Cluster
	sentinel *testserver.Sentinel
}

// pause stops (SIGSTOP) the servers that answer a Conn's commands — the node, the Sentinel's
// master, every master of the Cluster — and returns what resumes them. Only the data nodes
// stop: the sentinel goes on answering, as it does when the master's host stalls.
func (s servers) pause(t *testing.T, ctx context.Context) (resume func()) {
	t.Helper()
	var nodes []*testserver.Redis
	switch {
	case s.single != nil:
		nodes = []*testserver.Redis{s.single}
	case s.cluster != nil:
		nodes = s.cluster.Nodes
	case s.sentinel != nil:
		addr, err := s.sentinel.CurrentMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nodes = []*testserver.Redis{s.sentinel.Node(addr)}
	}
	var paused []*testserver.Redis
	resume = func() {
		for _, n := range paused {
			if err := n.Resume(); err != nil {
				t.Error(err)
			}
		}
		paused = nil
	}
	for _, n := range nodes {
		if err := n.Pause(); err != nil {
			resume()
			t.Fatal(err)
		}
		paused = append(paused, n)
	}
	return resume
}

// awaitAll waits for every event of want, in any order.
func awaitAll(t *testing.T, ch <-chan redisconn.Event, want ...redisconn.Event) {
	t.Helper()
	missing := make(map[redisconn.Event]bool, len(want))
	for _, e := range want {
		missing[e] = true
	}
	timeout := time.After(10 * time.Second)
	for len(missing) > 0 {
		select {
		case e := <-ch:
			delete(missing, e)
		case <-timeout:
			var left []redisconn.Event
			for e := range missing {
				left = append(left, e)
			}
			t.Fatalf("no %+v within 10s", left)
		}
	}
}

// subscribe sends the subscription of channels on ps as the owner of a subscription
// (releasewatch) does: after a failed send it sends it again a quarter second later, for 10 s
// at most. The server's acknowledgement is the caller's to wait for.
func subscribe(t *testing.T, ctx context.Context, ps redisconn.PubSub, channels ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ps.Subscribe(ctx, channels...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Subscribe(%q) failed for 10s: %v", channels, err)
		}
		time.Sleep(250 * time.Millisecond) // the owner's pause between two sends, not a wait for a state
	}
}

// numSub returns how many subscribers channel has on the masters.
func numSub(t *testing.T, ctx context.Context, c redisconn.Conn, sharded bool, channel string) int64 {
	t.Helper()
	cmd := "NUMSUB"
	if sharded {
		cmd = "SHARDNUMSUB"
	}
	var mu sync.Mutex
	var total int64
	err := c.ForEachMaster(ctx, func(ctx context.Context, n redisconn.Node) error {
		v, err := redisconn.Slice(n.Do(ctx, "PUBSUB", cmd, channel))
		if err != nil {
			return err
		}
		if len(v) != 2 {
			return fmt.Errorf("PUBSUB %s answered %v", cmd, v)
		}
		k, err := redisconn.Int64(v[1], nil)
		mu.Lock()
		total += k
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// awaitDropped waits, after the subscription connection of channel was killed, until two
// looks in a row, 10 ms apart, find no subscriber of it on the server — a client that waits
// before it connects again has noticed the loss by the second — or until the PubSub whose
// events ch carries has subscribed it again (a client that connects again at once may do so
// before a look). It returns the events still to come of the PubSub's reconnection.
func awaitDropped(t *testing.T, ctx context.Context, c redisconn.Conn, ch <-chan redisconn.Event, sharded bool, channel string) []redisconn.Event {
	t.Helper()
	again := redisconn.Event{Kind: redisconn.Subscribed, Channel: channel}
	deadline := time.Now().Add(10 * time.Second)
	looks := 0
	for {
		select {
		case e := <-ch:
			if e == again {
				return nil
			}
			continue
		default:
		}
		if numSub(t, ctx, c, sharded, channel) != 0 {
			looks = 0
		} else if looks++; looks == 2 {
			return []redisconn.Event{again}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was neither dropped nor subscribed again within 10s of the kill", channel)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testSubscribeDuringReconnect subscribes a second channel after the server dropped the
// subscription connection, while the PubSub makes the next one (rueidisconn waits a quarter
// second before it does): the first channel's subscription comes back with the second's, on
// the connection that carries both.
func testSubscribeDuringReconnect(t *testing.T, c redisconn.Conn, kind Kind) {
	ctx := ctxFor(t)
	sharded := kind == Cluster // one shard channel connection is per slot: the hash tag keeps one
	first, second := "redisconntest:{"+t.Name()+"}", "redisconntest:{"+t.Name()+"}:second"
	ps := c.PubSub(ctx, sharded, false)
	t.Cleanup(func() { _ = ps.Close() })
	subscribe(t, ctx, ps, first)
	ch, done := events(ps)
	await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: first})
	killPubSub(t, ctx, c)
	want := awaitDropped(t, ctx, c, ch, sharded, first)
	subscribe(t, ctx, ps, second)
	awaitAll(t, ch, append(want, redisconn.Event{Kind: redisconn.Subscribed, Channel: second})...)
	publishOn(t, ctx, c, sharded, first, "one")
	publishOn(t, ctx, c, sharded, second, "two")
	awaitAll(t, ch,
		redisconn.Event{Kind: redisconn.Message, Channel: first, Payload: "one"},
		redisconn.Event{Kind: redisconn.Message, Channel: second, Payload: "two"})
	closeAndWait(t, ps, done)
}

// closeAndWait closes ps and waits for Close and its Receive to return.
func closeAndWait(t *testing.T, ps redisconn.PubSub, received <-chan struct{}) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- ps.Close() }()
	timeout := time.After(10 * time.Second)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-timeout:
		t.Fatal("Close did not return within 10s")
	}
	select {
	case <-received:
	case <-timeout:
		t.Fatal("Receive did not return within 10s of Close")
	}
}

// testRestart restarts the server under a subscription, and subscribes a second channel while
// it is down: both subscriptions come back when it does.
func testRestart(t *testing.T, c redisconn.Conn, d Deployment) {
	ctx := ctxFor(t)
	first, second := "redisconntest:{"+t.Name()+"}", "redisconntest:{"+t.Name()+"}:second"
	ps := c.PubSub(ctx, false, false)
	t.Cleanup(func() { _ = ps.Close() })
	subscribe(t, ctx, ps, first)
	ch, done := events(ps)
	await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: first})
	if err := d.servers.single.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = ps.Subscribe(ctx, second) // the server is down: this send may fail
	if err := d.servers.single.Restart(); err != nil {
		t.Fatal(err)
	}
	subscribe(t, ctx, ps, second) // again, as an owner whose send failed does
	awaitAll(t, ch,
		redisconn.Event{Kind: redisconn.Subscribed, Channel: first},
		redisconn.Event{Kind: redisconn.Subscribed, Channel: second})
	// Published by a client of the test's own: the Conn's first call on a connection the
	// restart broke may fail, and is not what this test is about.
	rc := d.servers.single.ClientT(t)
	for _, m := range [][2]string{{first, "one"}, {second, "two"}} {
		if err := rc.Publish(ctx, m[0], m[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	awaitAll(t, ch,
		redisconn.Event{Kind: redisconn.Message, Channel: first, Payload: "one"},
		redisconn.Event{Kind: redisconn.Message, Channel: second, Payload: "two"})
	closeAndWait(t, ps, done)
}

// testSlotMove moves the slot of a shard channel to another master. The old owner drops the
// subscription and says so; the owner of the subscription then does what redisconn.Conn's
// PubSub asks of it (see follow), and the subscription reaches the new owner.
func testSlotMove(t *testing.T, c redisconn.Conn, d Deployment) {
	ctx := ctxFor(t)
	channel := "redisconntest:{" + t.Name() + "}"
	ps := c.PubSub(ctx, true, false)
	subscribe(t, ctx, ps, channel)
	ch, done := events(ps)
	await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: channel})

	cl := d.servers.cluster
	slot, err := cl.ClientT(t).ClusterKeySlot(ctx, channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	from, err := cl.SlotOwner(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.MoveSlot(ctx, int(slot), (from+1)%len(cl.Nodes)); err != nil {
		t.Fatal(err)
	}
	await(t, ch, redisconn.Event{Kind: redisconn.Unsubscribed, Channel: channel})
	closeAndWait(t, ps, done)

	ps, ch, done = follow(t, ctx, c, channel)
	publishOn(t, ctx, c, true, channel, "moved")
	await(t, ch, redisconn.Event{Kind: redisconn.Message, Channel: channel, Payload: "moved"})
	closeAndWait(t, ps, done)
}

// ackTimeout is how long the owner of a subscription (releasewatch) lets a subscription sent
// go unacknowledged before it sends it on a new connection: a client may drop the server's
// refusal (go-redis drops a MOVED reply to SSUBSCRIBE).
const ackTimeout = 5 * time.Second

// follow subscribes the shard channel channel again after the server dropped its
// subscription, as the owner of a subscription (releasewatch) does: on a new connection opened
// with reroute set; after a failed send, again on it a quarter second later; after ackTimeout
// without an acknowledgement, on another new connection. It gives up after 20 s, and returns
// the PubSub that the server acknowledged the subscription on, with its events.
func follow(t *testing.T, ctx context.Context, c redisconn.Conn, channel string) (redisconn.PubSub, <-chan redisconn.Event, <-chan struct{}) {
	t.Helper()
	giveUp := time.Now().Add(20 * time.Second)
	var lastErr error
	for time.Now().Before(giveUp) {
		ps := c.PubSub(ctx, true, true)
		ch, done := (<-chan redisconn.Event)(nil), (<-chan struct{})(nil)
		for time.Now().Before(giveUp) {
			lastErr = ps.Subscribe(ctx, channel)
			if ch == nil {
				ch, done = events(ps) // after the first Subscribe, whatever came of it
			}
			if lastErr == nil {
				break
			}
			time.Sleep(250 * time.Millisecond) // the owner's pause between two sends
		}
		if lastErr == nil {
			timeout := time.After(ackTimeout)
		wait:
			for {
				select {
				case e := <-ch:
					if e == (redisconn.Event{Kind: redisconn.Subscribed, Channel: channel}) {
						t.Cleanup(func() { _ = ps.Close() })
						return ps, ch, done
					}
				case <-timeout:
					break wait
				}
			}
		}
		closeAndWait(t, ps, done)
	}
	t.Fatalf("%s not subscribed again within 20s; the last send: %v", channel, lastErr)
	return nil, nil, nil
}

// deadlineSlack is how long past its context's deadline a call may return: the figure the
// README promises for fencelock's calls, which make these.
const deadlineSlack = 100 * time.Millisecond

// testStoppedServer stops the servers (SIGSTOP) under a new Conn and makes each kind of call
// with a short deadline: each fails, and returns by the deadline plus deadlineSlack. The
// Conn is new so that no idle connection of an earlier test spares it a dial.
func testStoppedServer(t *testing.T, dial Dial, d Deployment) {
	ctx := ctxFor(t)
	c := dial(t, d)
	key := "redisconntest:{" + t.Name() + "}"
	if _, err := c.Eval(ctx, replies, []string{key}, "incr"); err != nil {
		t.Fatal(err) // the Conn is connected while the servers answer
	}
	const deadline = 300 * time.Millisecond
	calls := []struct {
		name string
		call func(ctx context.Context) error
		// mayPass is set for a call that may succeed without an answer: a subscription
		// written on a connection is acknowledged later.
		mayPass bool
	}{
		{name: "Eval", call: func(ctx context.Context) error {
			_, err := c.Eval(ctx, replies, []string{key}, "incr")
			return err
		}},
		{name: "EvalBatch", call: func(ctx context.Context) error {
			calls := batchOf(t.Name(), 4)
			c.EvalBatch(ctx, calls)
			var errs []error
			for _, call := range calls {
				if call.Err == nil {
					return fmt.Errorf("call on %s answered %v", call.Keys[0], call.Reply)
				}
				errs = append(errs, call.Err)
			}
			return errors.Join(errs...)
		}},
		{name: "EvalWait", call: func(ctx context.Context) error {
			_, _, err := c.EvalWait(ctx, replies, []string{key}, []any{"incr"}, 1, time.Second)
			return err
		}},
		{name: "ForEachMaster", call: func(ctx context.Context) error {
			return c.ForEachMaster(ctx, func(ctx context.Context, n redisconn.Node) error {
				_, err := n.Do(ctx, "PING")
				return err
			})
		}},
		{name: "Subscribe", mayPass: true, call: func(ctx context.Context) error {
			ps := c.PubSub(ctx, d.Kind == Cluster, false)
			// Closed after the servers resume: Close may wait for a dial the call gave up on.
			t.Cleanup(func() { _ = ps.Close() })
			return ps.Subscribe(ctx, key)
		}},
	}
	resume := d.servers.pause(t, ctx)
	defer resume()
	var wg sync.WaitGroup
	for _, tc := range calls {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- tc.call(cctx) }()
			select {
			case err := <-done:
				took := time.Since(start)
				if took > deadline+deadlineSlack {
					t.Errorf("%s returned after %v with a %v deadline (%v)", tc.name, took.Round(time.Millisecond), deadline, err)
				}
				if err == nil && !tc.mayPass {
					t.Errorf("%s succeeded against stopped servers", tc.name)
				}
			case <-time.After(deadline + 10*time.Second):
				t.Errorf("%s had not returned 10s after its %v deadline", tc.name, deadline)
			}
		})
	}
	wg.Wait()
}
