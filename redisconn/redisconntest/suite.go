// Package redisconntest is the suite every redisconn.Conn passes: the go-redis Conn of the root
// module and each adapter's, on a single node, a Cluster and a Sentinel deployment that the
// suite starts (real servers on loopback ports; see internal/testserver for what it needs),
// and on a single node that refuses HELLO, so that clients speak RESP2 to it. Besides what a
// Conn does on healthy servers, the suite checks what it does under the faults of faults.go.
package redisconntest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisconn"
)

// Deployment is one Redis deployment the suite started.
type Deployment struct {
	Kind       Kind
	Addrs      []string // the node, the Cluster's masters, or the sentinels
	MasterName string   // of a Sentinel deployment
	// RESP2 says that the servers refuse HELLO, as Redis 5 and some proxies do: a client
	// speaks RESP2 to them, whatever protocol it asks for.
	RESP2 bool

	servers servers // what the fault cases stop, restart and reshard
}

// Kind is the shape of a deployment.
type Kind string

const (
	Single   Kind = "single"
	Cluster  Kind = "cluster"
	Sentinel Kind = "sentinel"
)

// Dial makes the Conn under test for d; what it opens it closes with t.Cleanup.
type Dial func(t *testing.T, d Deployment) redisconn.Conn

// Run runs the suite on each kind of deployment, and on a single node that speaks RESP2.
func Run(t *testing.T, dial Dial) {
	Deployments(t, func(t *testing.T, d Deployment) { runOn(t, dial, d) })
	t.Run("single-resp2", func(t *testing.T) {
		r := testserver.StartRedis(t, "--rename-command", "HELLO", "")
		runOn(t, dial, Deployment{Kind: Single, Addrs: []string{r.Addr}, RESP2: true, servers: servers{single: r}})
	})
}

// Deployments starts a single node, a Cluster of 3 masters and a Sentinel deployment with one
// replica, one after the other, and runs fn on each in a subtest named after its kind.
func Deployments(t *testing.T, fn func(t *testing.T, d Deployment)) { deployments(t, false, fn) }

// DeploymentsAtOnce is Deployments with the three deployments at once, each subtest in a
// goroutine of its own, for an fn that shares nothing between them: a suite that mostly waits
// on its servers then takes the time of its slowest deployment, not the sum of all three.
func DeploymentsAtOnce(t *testing.T, fn func(t *testing.T, d Deployment)) { deployments(t, true, fn) }

func deployments(t *testing.T, atOnce bool, fn func(t *testing.T, d Deployment)) {
	starts := []struct {
		kind  Kind
		start func(t *testing.T) Deployment
	}{
		{Single, func(t *testing.T) Deployment {
			r := testserver.StartRedis(t)
			return Deployment{Kind: Single, Addrs: []string{r.Addr}, servers: servers{single: r}}
		}},
		{Cluster, func(t *testing.T) Deployment {
			c := testserver.StartCluster(t, 3)
			return Deployment{Kind: Cluster, Addrs: c.Addrs, servers: servers{cluster: c}}
		}},
		{Sentinel, func(t *testing.T) Deployment {
			s := testserver.StartSentinel(t)
			return Deployment{Kind: Sentinel, Addrs: s.SentinelAddrs, MasterName: s.MasterName, servers: servers{sentinel: s}}
		}},
	}
	var wg sync.WaitGroup
	for _, d := range starts {
		run := func() { t.Run(string(d.kind), func(t *testing.T) { fn(t, d.start(t)) }) }
		if atOnce {
			wg.Go(run)
		} else {
			run()
		}
	}
	wg.Wait()
}

func runOn(t *testing.T, dial Dial, d Deployment) {
	c := dial(t, d)
	masters := 1
	if d.Kind == Cluster {
		masters = len(d.Addrs)
	}
	t.Run("Deployment", func(t *testing.T) { testDeployment(t, c, d.Kind, masters) })
	t.Run("Replies", func(t *testing.T) { testReplies(t, c) })
	t.Run("NoScript", func(t *testing.T) { testNoScript(t, c) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, c) })
	t.Run("Wait", func(t *testing.T) { testWait(t, c, d.Kind) })
	t.Run("PubSub", func(t *testing.T) { testPubSub(t, c) })
	t.Run("PubSubReconnect", func(t *testing.T) { testPubSubReconnect(t, c, d.Kind) })
	t.Run("Tracking", func(t *testing.T) { testTracking(t, c) })
	// The faults last: they stop, restart and reshard the servers.
	t.Run("SubscribeDuringReconnect", func(t *testing.T) { testSubscribeDuringReconnect(t, c, d.Kind) })
	if d.Kind == Cluster {
		t.Run("SlotMove", func(t *testing.T) { testSlotMove(t, c, d) })
	}
	if d.Kind == Single {
		t.Run("Restart", func(t *testing.T) { testRestart(t, c, d) })
	}
	t.Run("StoppedServer", func(t *testing.T) { testStoppedServer(t, dial, d) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testDeployment(t *testing.T, c redisconn.Conn, kind Kind, masters int) {
	ctx := ctxFor(t)
	if c.Cluster() != (kind == Cluster) {
		t.Errorf("Cluster() = %v on a %s deployment", c.Cluster(), kind)
	}
	if c.String() == "" {
		t.Error("String() is empty")
	}
	var mu sync.Mutex
	seen := 0
	err := c.ForEachMaster(ctx, func(ctx context.Context, n redisconn.Node) error {
		v, err := n.Do(ctx, "PING")
		if err != nil {
			return err
		}
		if v != "PONG" {
			return fmt.Errorf("PING answered %v (%T)", v, v)
		}
		mu.Lock()
		seen++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != masters {
		t.Errorf("ForEachMaster called for %d masters, want %d", seen, masters)
	}
}

var replies = redisconn.NewScript(`-- KEYS[1]: a key of the test; ARGV[1]: what to return
local what = ARGV[1]
if what == 'int' then return 42 end
if what == 'str' then return 'hello' end
if what == 'arr' then return {1, 'two', {3}, false, 'five'} end
if what == 'nil' then return nil end
if what == 'err' then return redis.error_reply('FENCELOCK refused ' .. KEYS[1]) end
if what == 'wrongtype' then
  redis.call('SET', KEYS[1], 'x')
  return redis.call('HGET', KEYS[1], 'f')
end
return redis.call('INCR', KEYS[1])
`)

func testReplies(t *testing.T, c redisconn.Conn) {
	ctx := ctxFor(t)
	key := "redisconntest:" + t.Name()
	for _, tc := range []struct {
		what string
		want string
	}{
		{"int", "int64 42"},
		{"str", "string hello"},
		{"arr", "[]interface {} [1 two [3] <nil> five]"},
		{"nil", "<nil> <nil>"},
	} {
		v, err := c.Eval(ctx, replies, []string{key}, tc.what)
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		if got := fmt.Sprintf("%T %v", v, v); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.what, got, tc.want)
		}
	}
	_, err := c.Eval(ctx, replies, []string{key}, "err")
	if se, ok := errors.AsType[*redisconn.ServerError](err); !ok || se.Msg != "FENCELOCK refused "+key {
		t.Errorf("error reply: got %v (%T), want a *ServerError that says FENCELOCK refused %s", err, err, key)
	}
	_, err = c.Eval(ctx, replies, []string{key}, "wrongtype")
	if !redisconn.HasPrefix(err, "WRONGTYPE") {
		t.Errorf("a command's error in the script: got %v (%T), want a *ServerError starting WRONGTYPE", err, err)
	}
	if _, err := redisconn.Int64(c.Eval(ctx, replies, []string{key}, "str")); err == nil {
		t.Error("Int64 of a string reply gave no error")
	}
}

// flush empties the script cache of every master.
func flush(t *testing.T, ctx context.Context, c redisconn.Conn) {
	t.Helper()
	err := c.ForEachMaster(ctx, func(ctx context.Context, n redisconn.Node) error {
		_, err := n.Do(ctx, "SCRIPT", "FLUSH")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testNoScript(t *testing.T, c redisconn.Conn) {
	ctx := ctxFor(t)
	key := "redisconntest:" + t.Name()
	flush(t, ctx, c)
	n, err := redisconn.Int64(c.Eval(ctx, replies, []string{key}, "incr"))
	if err != nil || n != 1 {
		t.Fatalf("after SCRIPT FLUSH: got %d, %v, want 1", n, err)
	}
	flush(t, ctx, c)
	calls := batchOf(t.Name(), 8)
	c.EvalBatch(ctx, calls)
	for k, call := range calls {
		if n, err := redisconn.Int64(call.Reply, call.Err); err != nil || n != 1 {
			t.Errorf("batch call %d after SCRIPT FLUSH: got %d, %v, want 1", k, n, err)
		}
	}
}

// batchOf returns n INCR calls on keys that spread over a Cluster's slots.
func batchOf(name string, n int) []redisconn.Call {
	calls := make([]redisconn.Call, n)
	for k := range calls {
		calls[k] = redisconn.Call{Script: replies, Keys: []string{fmt.Sprintf("redisconntest:%s:%d", name, k)}, Args: []any{"incr"}}
	}
	return calls
}

func testBatch(t *testing.T, c redisconn.Conn) {
	ctx := ctxFor(t)
	calls := batchOf(t.Name(), 20)
	calls[7].Args = []any{"wrongtype"}
	calls[11].Args = []any{"str"}
	for round := int64(1); round <= 2; round++ {
		c.EvalBatch(ctx, calls)
		for k, call := range calls {
			switch k {
			case 7:
				if !redisconn.HasPrefix(call.Err, "WRONGTYPE") {
					t.Errorf("round %d call 7: got %v, %v, want WRONGTYPE", round, call.Reply, call.Err)
				}
			case 11:
				if call.Reply != "hello" || call.Err != nil {
					t.Errorf("round %d call 11: got %v, %v, want hello", round, call.Reply, call.Err)
				}
			default:
				if n, err := redisconn.Int64(call.Reply, call.Err); err != nil || n != round {
					t.Errorf("round %d call %d: got %d, %v, want %d", round, k, n, err, round)
				}
			}
		}
	}
	one := batchOf(t.Name()+":one", 1)
	c.EvalBatch(ctx, one)
	if n, err := redisconn.Int64(one[0].Reply, one[0].Err); err != nil || n != 1 {
		t.Errorf("a batch of one: got %d, %v, want 1", n, err)
	}
}

func testWait(t *testing.T, c redisconn.Conn, kind Kind) {
	ctx := ctxFor(t)
	key := "redisconntest:" + t.Name()
	want, timeout := 0, 100*time.Millisecond // no replica to wait for: WAIT takes its whole timeout
	if kind == Sentinel {
		want, timeout = 1, 2*time.Second // the suite's Sentinel deployment has one replica
	}
	for round := int64(1); round <= 2; round++ {
		if round == 2 {
			flush(t, ctx, c)
		}
		v, acked, err := c.EvalWait(ctx, replies, []string{key}, []any{"incr"}, 1, timeout)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if v != round || acked != want {
			t.Errorf("round %d: got %v (%T) acknowledged by %d, want %d acknowledged by %d", round, v, v, acked, round, want)
		}
	}
}

// events collects what a PubSub receives.
func events(ps redisconn.PubSub) (<-chan redisconn.Event, <-chan struct{}) {
	ch := make(chan redisconn.Event, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ps.Receive(func(e redisconn.Event) { ch <- e })
	}()
	return ch, done
}

func await(t *testing.T, ch <-chan redisconn.Event, want redisconn.Event) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-ch:
			if e == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %+v within 10s", want)
		}
	}
}

var publish = redisconn.NewScript(`-- KEYS[1]: the channel; ARGV[1]: PUBLISH or SPUBLISH; ARGV[2]: the message
return redis.call(ARGV[1], KEYS[1], ARGV[2])
`)

func publishOn(t *testing.T, ctx context.Context, c redisconn.Conn, sharded bool, channel, msg string) {
	t.Helper()
	cmd := "PUBLISH"
	if sharded {
		cmd = "SPUBLISH"
	}
	if _, err := c.Eval(ctx, publish, []string{channel}, cmd, msg); err != nil {
		t.Fatal(err)
	}
}

func testPubSub(t *testing.T, c redisconn.Conn) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			ctx := ctxFor(t)
			channel := "redisconntest:{" + t.Name() + "}"
			ps := c.PubSub(ctx, sharded, false)
			if err := ps.Subscribe(ctx, channel); err != nil {
				t.Fatal(err)
			}
			ch, done := events(ps)
			await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: channel})
			publishOn(t, ctx, c, sharded, channel, "one")
			await(t, ch, redisconn.Event{Kind: redisconn.Message, Channel: channel, Payload: "one"})
			other := "redisconntest:{" + t.Name() + "}:other"
			if err := ps.Subscribe(ctx, other); err != nil {
				t.Fatal(err)
			}
			await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: other})
			if err := ps.Unsubscribe(ctx, channel); err != nil {
				t.Fatal(err)
			}
			await(t, ch, redisconn.Event{Kind: redisconn.Unsubscribed, Channel: channel})
			publishOn(t, ctx, c, sharded, channel, "unheard")
			publishOn(t, ctx, c, sharded, other, "two")
			await(t, ch, redisconn.Event{Kind: redisconn.Message, Channel: other, Payload: "two"})
			if err := ps.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Receive did not return within 10s of Close")
			}
			for {
				select {
				case e := <-ch:
					if e.Payload == "unheard" {
						t.Errorf("a message on an unsubscribed channel came: %+v", e)
					}
					continue
				default:
				}
				break
			}
		})
	}
}

// testPubSubReconnect kills the subscription's connection on the server: the PubSub connects
// again by itself and acknowledges the subscription again, and messages come again.
func testPubSubReconnect(t *testing.T, c redisconn.Conn, kind Kind) {
	ctx := ctxFor(t)
	sharded := kind == Cluster
	channel := "redisconntest:{" + t.Name() + "}"
	ps := c.PubSub(ctx, sharded, false)
	t.Cleanup(func() { _ = ps.Close() })
	if err := ps.Subscribe(ctx, channel); err != nil {
		t.Fatal(err)
	}
	ch, _ := events(ps)
	await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: channel})
	killPubSub(t, ctx, c)
	await(t, ch, redisconn.Event{Kind: redisconn.Subscribed, Channel: channel})
	publishOn(t, ctx, c, sharded, channel, "again")
	await(t, ch, redisconn.Event{Kind: redisconn.Message, Channel: channel, Payload: "again"})
}

// killPubSub kills every pub/sub connection of every master (CLIENT KILL TYPE pubsub).
func killPubSub(t *testing.T, ctx context.Context, c redisconn.Conn) {
	t.Helper()
	err := c.ForEachMaster(ctx, func(ctx context.Context, n redisconn.Node) error {
		_, err := n.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
		if err != nil && !strings.Contains(err.Error(), "No such client") {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testTracking checks a Tracker: a read key's change is pushed, a key not read is not, and a
// killed connection comes back with changed(nil), after which reads watch again. A Conn that
// is no Tracker skips it: its holders learn of a loss at their next renewal.
func testTracking(t *testing.T, c redisconn.Conn) {
	tk, ok := c.(redisconn.Tracker)
	if !ok {
		t.Skipf("%T is no redisconn.Tracker", c)
	}
	ctx := ctxFor(t)
	p := &trackProbe{t: t, ctx: ctx, c: c, changes: make(chan []string, 64)}
	tr, err := tk.Track(func(keys []string) { p.changes <- slices.Clone(keys) })
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	p.tr = tr
	watched, other := "redisconntest:{"+t.Name()+"}:watched", "redisconntest:{"+t.Name()+"}:other"
	p.read(watched)
	if keys := p.next("connecting"); keys != nil {
		t.Fatalf("first pushed %q, want nil: the session connected", keys)
	}
	p.incr(other)
	p.incr(watched)
	if keys := p.next("a write of the key read"); !slices.Equal(keys, []string{watched}) {
		t.Fatalf("pushed %q, want [%s] alone: a key not read is not watched", keys, watched)
	}
	p.incr(watched)
	select {
	case keys := <-p.changes:
		t.Fatalf("pushed %q for a second write without a read between", keys)
	case <-time.After(100 * time.Millisecond):
	}
	killPubSub(t, ctx, c)
	if keys := p.next("killing the subscription"); keys != nil {
		t.Fatalf("after the kill pushed %q, want nil: any key may have changed", keys)
	}
	p.read(watched)
	p.drain()
	p.incr(watched)
	if keys := p.next("a write after the reconnection"); !slices.Equal(keys, []string{watched}) {
		t.Fatalf("after the reconnection pushed %q, want [%s]", keys, watched)
	}
}

// trackProbe drives one tracking session for testTracking and hears what it pushes.
type trackProbe struct {
	t       *testing.T
	ctx     context.Context
	c       redisconn.Conn
	tr      redisconn.Tracking
	changes chan []string // what changed was called with
}

// read reads key through the session, again until the session can read (10 s at most).
func (p *trackProbe) read(key string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := []redisconn.TrackedRead{{Key: key, Args: []any{"GET", key}}}
		p.tr.Read(p.ctx, r)
		if r[0].Err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("read through the session: %v", r[0].Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// next waits for the next change pushed after what.
func (p *trackProbe) next(what string) []string {
	p.t.Helper()
	select {
	case keys := <-p.changes:
		return keys
	case <-time.After(10 * time.Second):
		p.t.Fatalf("no change pushed after %s", what)
		return nil
	}
}

// drain forgets the changes pushed so far.
func (p *trackProbe) drain() {
	for {
		select {
		case <-p.changes:
		default:
			return
		}
	}
}

// incr writes key, by a script through the Conn under test.
func (p *trackProbe) incr(key string) {
	p.t.Helper()
	if _, err := p.c.Eval(p.ctx, replies, []string{key}, "incr"); err != nil {
		p.t.Fatal(err)
	}
}
