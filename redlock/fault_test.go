package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// With two of five nodes dead, the other three are a majority: the lock works.
func TestQuorumWithTwoNodesDown(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	servers, as := startNodes(t, 5)
	clients := dial(t, as)
	b := newBackend(t, clients)
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(2*time.Second)))
	for _, s := range servers[3:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := c.TryObtain(ctx, "two-down")
	if err != nil {
		t.Fatalf("TryObtain with 3 of 5 nodes up: %v", err)
	}
	if lock.Token() <= 0 {
		t.Fatalf("token %d", lock.Token())
	}
	if _, err := newLocker(t, b).TryObtain(ctx, "two-down"); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("a second owner: %v, want ErrNotObtained", err)
	}
	info, err := c.Inspect(ctx, "two-down")
	if err != nil || !info.Held || info.Owner != lock.Owner() || info.Token != lock.Token() {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := owners(clients[:3], b.Key("two-down")); !slices.Equal(got, []string{"", "", ""}) {
		t.Fatalf("owners on the live nodes after release: %q", got)
	}
}

// With three of five nodes dead there is no majority: the error says the nodes are down, not
// that someone holds the lock, and names the nodes.
func TestNoQuorumWithThreeNodesDown(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	servers, as := startNodes(t, 5)
	clients := dial(t, as)
	b := newBackend(t, clients)
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(2*time.Second)))
	if _, err := c.Inspect(ctx, "three-down"); err != nil { // the nodes are seen once, all up
		t.Fatal(err)
	}
	for _, s := range servers[2:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.TryObtain(ctx, "three-down")
	if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("TryObtain with 2 of 5 nodes up: %v, want ErrUnavailable and not ErrNotObtained", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a node timeout reads as the caller's deadline: %v", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("no QuorumError in %v", err)
	}
	if qe.Granted != 2 || qe.Needed != 3 || len(qe.Nodes) != 3 {
		t.Fatalf("QuorumError: granted %d, needed %d, %d node errors: %v", qe.Granted, qe.Needed, len(qe.Nodes), err)
	}
	down := []int{qe.Nodes[0].Node, qe.Nodes[1].Node, qe.Nodes[2].Node}
	slices.Sort(down)
	if !slices.Equal(down, []int{2, 3, 4}) {
		t.Fatalf("failed nodes %v, want [2 3 4]", down)
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) || ne.Addr == "" || !errors.Is(ne, fencelock.ErrUnavailable) {
		t.Fatalf("NodeError: %+v", ne)
	}
	// The two nodes that granted are released again, in the background.
	waitFor(t, 5*time.Second, "owners left on the live nodes", func() bool {
		return slices.Equal(owners(clients[:2], b.Key("three-down")), []string{"", ""})
	})
	// Inspect needs a majority too.
	if _, err := c.Inspect(ctx, "three-down"); !errors.As(err, &qe) {
		t.Fatalf("Inspect: %v, want a QuorumError", err)
	}
}

// A node restarted empty (no persistence) forgets the lock. Restarted only after a TTL, it
// cannot give the lock to anyone else while the holder keeps a majority, and the holder's next
// renewal takes the free key back.
func TestRestartedNodeIsTakenBack(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	servers, as := startNodes(t, 5)
	clients := dial(t, as)
	ttl := 600 * time.Millisecond
	hb := newBackend(t, clients, redlock.WithNodeTimeout(150*time.Millisecond))
	holder := newLocker(t, hb, fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	other := newLocker(t, newBackend(t, dial(t, as), redlock.WithNodeTimeout(150*time.Millisecond)), fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	key := redlock.New(clients).Key("restart")

	lock, err := holder.Obtain(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 200*time.Millisecond) // the delayed restart
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryObtain(ctx, "restart"); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client while the holder keeps 4 of 5 nodes: %v", err)
	}
	// A renewal every ttl/3 takes it back; the bound is for a hang only: beside a loaded
	// suite, the renewals' calls to the restarted node can miss their 150 ms for a second or
	// more while its connection is made again.
	waitFor(t, 20*time.Second, "the holder's renewal did not take node 0 back", func() bool {
		return owners(clients[:1], key)[0] == lock.Owner()
	})
	if err := lock.Context().Err(); err != nil {
		t.Fatalf("the holder lost the lock: %v", err)
	}
	if _, err := other.TryObtain(ctx, "restart"); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client after the take-back: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Node 0's key knew no hold IDs; the release deleted it with the others, at once or, had
	// node 0 answered after the majority, in its own call.
	hb.Settle()
	if got := owners(clients, key); !slices.Equal(got, make([]string, 5)) {
		t.Fatalf("owners after release: %q", got)
	}
	if l, err := other.TryObtain(ctx, "restart"); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		_ = l.Release(ctx)
	}
}

// When the holder has exactly a majority and one of its nodes restarts empty after a TTL, the
// holder is left with a minority: its lock ends (the validity deadline passes without a
// majority's renewal) before another client can take the lock. No overlap.
func TestRestartedNodeOfABareMajority(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	servers, as := startNodes(t, 5)
	ttl := 600 * time.Millisecond
	clients := dial(t, as)
	holder := newLocker(t, newBackend(t, clients, redlock.WithNodeTimeout(150*time.Millisecond)), fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	if _, err := holder.Inspect(ctx, "bare"); err != nil { // the nodes are seen once, all up
		t.Fatal(err)
	}
	for _, s := range servers[3:] {
		_ = s.Kill()
	}
	lock, err := holder.Obtain(ctx, "bare") // on nodes 0, 1, 2 only
	if err != nil {
		t.Fatal(err)
	}
	// The acquire calls to 3 and 4 retry their connection until the node timeout and the
	// linger after it (500 ms): were the nodes back by then, the calls would take the lock
	// there. Wait them out.
	time.Sleep(700 * time.Millisecond)
	// Node 0 goes before 3 and 4 come back empty: with 0, 1, 2 confirming, a renewal would
	// rightly take 3 and 4, and the holder would keep its lock on four nodes.
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[3:] {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	other := newLocker(t, newBackend(t, dial(t, as), redlock.WithNodeTimeout(150*time.Millisecond)), fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	// Until node 0 comes back, nobody has a majority: the holder two nodes, the free ones two.
	time.Sleep(ttl + 200*time.Millisecond)
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	got, err := other.Obtain(ctx, "bare")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release(ctx)
	if lock.Valid() == nil {
		t.Fatal("the old holder still trusts its lock while another client holds it")
	}
	if got.Token() <= lock.Token() {
		t.Fatalf("token %d after %d", got.Token(), lock.Token())
	}
}

// A watchdog keeps a lock for six TTLs while one node is down. (The TTL is a second: with
// 400 ms, a renewal held up some 270 ms on a loaded two-core machine let the lock lapse, and
// the other client rightly got in.)
func TestWatchdogWithANodeDown(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	servers, as := startNodes(t, 5)
	ttl := time.Second
	b := newBackend(t, dial(t, as), redlock.WithNodeTimeout(100*time.Millisecond))
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	if err := servers[4].Kill(); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	lock, err := c.Obtain(ctx, "watchdog", fencelock.WithOnLost(func(_ string, err error) { lost <- err }))
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, newBackend(t, dial(t, as), redlock.WithNodeTimeout(150*time.Millisecond)), fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	for range 6 {
		time.Sleep(ttl)
		if got, err := other.TryObtain(ctx, "watchdog"); !errors.Is(err, fencelock.ErrNotObtained) {
			if err == nil && lock.Valid() == nil {
				t.Fatalf("another client got in (token %d) while the holder trusts its lock (token %d) until %v from now", got.Token(), lock.Token(), time.Until(lock.ValidUntil()))
			}
			t.Fatalf("another client got in: %v (the holder: %v)", err, lock.Valid())
		}
	}
	select {
	case err := <-lost:
		t.Fatalf("lost: %v", err)
	default:
	}
	if err := lock.Context().Err(); err != nil {
		t.Fatalf("context ended: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A node that stops answering mid-acquire (SIGSTOP) does not hold up an acquisition that a
// majority grants; three of them make it fail as unavailable within the node timeout, and the
// lock is free again once they are back and the stale grants expired.
func TestPausedNodesMidAcquire(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	servers, as := startNodes(t, 5)
	b := newBackend(t, dial(t, as), redlock.WithNodeTimeout(150*time.Millisecond))
	ttl := 500 * time.Millisecond
	c := newLocker(t, b, fencelock.WithDefaults(fencelock.WithTTL(ttl)))
	if _, err := c.Inspect(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	pause := func(ss ...*testserver.Redis) {
		for _, s := range ss {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Resume() })
		}
	}
	resume := func(ss ...*testserver.Redis) {
		for _, s := range ss {
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}

	pause(servers[0])
	g, err := b.Acquire(ctx, driver.Request{Name: "paused", Owner: "one-paused", TTL: ttl})
	if err != nil {
		t.Fatalf("with one node paused: %v", err)
	}
	if g.Validity <= 0 || g.Validity > ttl || g.Token <= 0 || g.Count != 1 {
		t.Fatalf("grant %+v", g)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: "paused", Owner: "one-paused", TTL: ttl}, ""); err != nil {
		t.Fatal(err)
	}

	pause(servers[1], servers[2])
	start := time.Now()
	_, err = c.TryObtain(ctx, "paused")
	if !errors.Is(err, fencelock.ErrUnavailable) || !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Fatalf("with three nodes paused: %v, want ErrUnavailable with node timeouts", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the failed attempt took %v", took)
	}
	resume(servers[0], servers[1], servers[2])
	// The paused nodes now run the acquisitions they had queued; those expire after the TTL,
	// or are released by the cleanup that follows them.
	lock, err := c.Obtain(ctx, "paused")
	if err != nil {
		t.Fatalf("after resume: %v", err)
	}
	_ = lock.Release(ctx)
}

// Slow links eat the validity: when a majority grants the lock only after the TTL minus the
// drift allowance has passed, the acquisition fails (ErrValidityExpired) and nothing is left
// behind, instead of returning a lock that has already expired.
func TestSlowNodesEatValidity(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	_, as := startNodes(t, 5)
	proxies, via := proxied(t, as)
	direct := dial(t, as)
	ttl := 100 * time.Millisecond
	b := newBackend(t, dial(t, via), redlock.WithNodeTimeout(90*time.Millisecond))
	// Warm up: a connection per node, and the scripts loaded (the token round's too: the fence
	// counters are ahead of the proposal), so that each call below is one round trip.
	for _, c := range direct {
		if err := c.(*redis.Client).Set(ctx, b.Key("slow")+":fence", time.Now().UnixMicro()+1e9, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Acquire(ctx, driver.Request{Name: "slow", Owner: "warm-up", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: "slow", Owner: "warm-up", TTL: time.Second}, ""); err != nil {
		t.Fatal(err)
	}
	// A first acquisition whose proposed token is below the fence counters needs a token round
	// after the grant: two round trips. (Counters stay below 2^53, as µs clocks do for
	// centuries: Lua compares them as doubles.)
	ahead := time.Now().UnixMicro() + 1e12
	for _, c := range direct {
		if err := c.(*redis.Client).Set(ctx, b.Key("slow")+":fence", ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range proxies {
		p.SetDelay(30 * time.Millisecond) // each round trip 60ms: two of them exceed the TTL
	}
	_, err := b.Acquire(ctx, driver.Request{Name: "slow", Owner: "slow-owner", TTL: ttl})
	// On a loaded machine a reply can also miss the 90 ms node timeout; either way the
	// acquisition must fail as unavailable, never hand out a lock that has already expired.
	if err == nil || !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("acquire over slow links: %v, want ErrValidityExpired", err)
	}
	if !errors.Is(err, redlock.ErrValidityExpired) {
		t.Logf("acquire over slow links failed by node timeouts rather than by validity: %v", err)
	}
	// The failed acquisition is undone in the background, once each node's call has landed.
	waitFor(t, 5*time.Second, "owners left behind", func() bool {
		return slices.Equal(owners(direct, b.Key("slow")), make([]string, 5))
	})

	// With a TTL long against the delay the same links give a lock. Its validity is the TTL,
	// counted from the send (backend.go): the round trips are behind the send, and the Client
	// counts them by counting from before its call.
	long := 2 * time.Second
	b = newBackend(t, dial(t, via), redlock.WithNodeTimeout(time.Second))
	g, err := b.Acquire(ctx, driver.Request{Name: "slow", Owner: "slow-owner", TTL: long})
	if err != nil {
		t.Fatal(err)
	}
	if counted(g.Validity, long) != long || g.Elapsed < 0 {
		t.Fatalf("validity %v, elapsed %v of TTL %v after two 60ms round trips: want the TTL from the send", g.Validity, g.Elapsed, long)
	}
	if g.Token <= ahead {
		t.Fatalf("token %d is not above the fence counters", g.Token)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: "slow", Owner: "slow-owner", TTL: long}, ""); err != nil {
		t.Fatal(err)
	}
}

// sendLate holds back a client's next commands before they are sent, as a slow link or a
// descheduled client would: the server sees them late.
type sendLate struct {
	mu sync.Mutex
	by []time.Duration // for each of the next commands, how long it is held back
}

// hold holds back the client's next len(by) commands, each by its own time.
func (h *sendLate) hold(by ...time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.by = append(h.by, by...)
}

// toCome is how many of the commands it was told to hold back have not come yet.
func (h *sendLate) toCome() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.by)
}

func (h *sendLate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sendLate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *sendLate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		var d time.Duration
		h.mu.Lock()
		if len(h.by) > 0 {
			d, h.by = h.by[0], h.by[1:]
		}
		h.mu.Unlock()
		time.Sleep(d)
		return next(ctx, cmd)
	}
}

// lateNode starts five nodes, and returns a Backend over them (node timeout 2s) whose client
// to node k holds back its next commands as the returned hook is told to, and a client to each
// node that bypasses the hook.
func lateNode(t *testing.T, k int) (*redlock.Backend, []redisbackend.Client, *sendLate) {
	t.Helper()
	b, direct, late := lateNodes(t, 5)
	return b, direct, late[k]
}

// lateNodes starts n nodes, and returns a Backend over them (node timeout 2s) whose client to
// each node holds back its next commands as that node's hook is told to, and a client to each
// node that bypasses the hooks.
func lateNodes(t *testing.T, n int) (*redlock.Backend, []redisbackend.Client, []*sendLate) {
	t.Helper()
	_, as := startNodes(t, n)
	clients := dial(t, as)
	late := make([]*sendLate, n)
	for i, c := range clients {
		late[i] = &sendLate{}
		c.(*redis.Client).AddHook(late[i])
	}
	return newBackend(t, clients, redlock.WithNodeTimeout(2*time.Second)), dial(t, as), late
}

// Acquire and Release return once a majority answered. A release must still not overtake the
// acquire call on a node that answers late: the acquire would then land after it and leave
// the key on that node, held for no one until its TTL ends.
func TestReleaseWaitsForALateAcquireOnItsNode(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNode(t, 4)
	req := driver.Request{Name: "late", Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	// Warm up: scripts loaded and a connection per node, so that the calls below are one each.
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}, req.Hold); err != nil {
		t.Fatal(err)
	}
	b.Settle() // the warm-up's last calls, so that the next call on node 4 is the acquire below

	late.hold(500 * time.Millisecond)
	req.Hold = "h2"
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := owners(direct, b.Key("late")); got[4] != "" || slices.Index(got, "o") < 0 {
		t.Fatalf("owners right after Acquire returned: %q; want the majority without the late node", got)
	}
	left, err := b.Release(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}, req.Hold)
	if err != nil || left != 0 {
		t.Fatalf("release: %d, %v", left, err)
	}
	if err := b.Close(); err != nil { // waits for the calls still in flight
		t.Fatal(err)
	}
	if got := owners(direct, b.Key("late")); !slices.Equal(got, make([]string, 5)) {
		t.Fatalf("owners after the late node answered: %q; want none", got)
	}
}

// A node that took a lock back after a restart knows no hold IDs, so releasing a hold there
// leaves the key; once the majority has freed the lock, that node is cleared too, also when it
// answers the release only after Release returned.
func TestLateNodeThatKeepsTheLockIsCleared(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNode(t, 0)
	req := driver.Request{Name: "kept", Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	b.Settle()
	// Node 0's key as a take-back leaves it: owner, token and count, no hold IDs.
	if err := direct[0].(*redis.Client).HDel(ctx, b.Key("kept"), "h:h1").Err(); err != nil {
		t.Fatal(err)
	}
	late.hold(300 * time.Millisecond)
	left, err := b.Release(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}, req.Hold)
	if err != nil || left != 0 {
		t.Fatalf("release: %d, %v", left, err)
	}
	if got := owners(direct, b.Key("kept")); got[0] != "o" {
		t.Fatalf("owners right after Release returned: %q; want node 0 not answered yet", got)
	}
	b.Settle()
	if got := owners(direct, b.Key("kept")); !slices.Equal(got, make([]string, 5)) {
		t.Fatalf("owners after node 0 answered: %q; want none", got)
	}
}

// A reentrant acquire that reaches a node before the owner's first acquire there waits for it:
// otherwise it would create the key there with its own proposed token, one that was never
// handed out, and the node would keep it for as long as the lock is held.
func TestReentrantAcquireWaitsForTheFirstOnItsNode(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNode(t, 4)
	warm := driver.Request{Name: "warm-up", Owner: "w", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, warm); err != nil { // identifies the nodes, loads the script
		t.Fatal(err)
	}
	b.Settle()

	late.hold(300 * time.Millisecond) // node 4's first acquire goes out 300 ms late
	req := driver.Request{Name: "reentrant", Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	first, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req.Hold = "h2"
	inner, err := b.Acquire(ctx, req)
	if err != nil || inner.Token != first.Token || inner.Count != 2 {
		t.Fatalf("reentrant acquire: %+v, %v; want token %d, count 2", inner, err, first.Token)
	}
	b.Settle()
	for i, c := range direct {
		h, err := c.(*redis.Client).HGetAll(ctx, b.Key("reentrant")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if h["owner"] != "o" || h["count"] != "2" || h["token"] != strconv.FormatInt(first.Token, 10) {
			t.Fatalf("node %d: %v; want owner o, count 2, token %d", i, h, first.Token)
		}
	}
	if info, err := b.Inspect(ctx, "reentrant"); err != nil || info.Token != first.Token || info.Count != 2 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
}

// A failed acquisition returns once a majority refused it, and its call to a node that had not
// answered yet can still take the lock there after the holder released it; the undo releases
// it again once that call has landed. The next acquisition through the same Backend comes
// under a fresh owner, as the Client's next TryObtain or Obtain makes it, and waits on that
// node for the undo. Before, it met the failed attempt's hold there and, with the holder's key
// still on nodes the release had not reached, was refused a lock that was free.
func TestAcquisitionWaitsForTheUndoOfTheOneBefore(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNode(t, 4)
	// The holder reaches nodes 2 and 3 through proxies, cut before it releases.
	via := make([]string, len(direct))
	var cut []*testserver.Proxy
	for i, c := range direct {
		via[i] = c.(*redis.Client).Options().Addr
		if i == 2 || i == 3 {
			p := testserver.StartProxy(t, via[i])
			via[i] = p.Addr
			cut = append(cut, p)
		}
	}
	holder := newBackend(t, dial(t, via), redlock.WithNodeTimeout(2*time.Second))
	ttl := 10 * time.Second
	for _, w := range []*redlock.Backend{holder, b} { // identifies the nodes, loads the scripts
		lease := driver.Lease{Name: "warm-up", Owner: "w", TTL: ttl}
		if _, err := w.Acquire(ctx, driver.Request{Name: lease.Name, Owner: lease.Owner, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Release(ctx, lease, ""); err != nil {
			t.Fatal(err)
		}
		w.Settle()
	}

	key := b.Key("ghost")
	if _, err := holder.Acquire(ctx, driver.Request{Name: "ghost", Owner: "holder", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	holder.Settle()
	for _, p := range cut {
		p.Cut()
	}
	// Node 4 sees the failed attempt's acquire 300 ms late, after the release, and its undo
	// 400 ms after that attempt's call there returned.
	late.hold(300*time.Millisecond, 400*time.Millisecond)
	var held *fencelock.HeldError
	if _, err := b.Acquire(ctx, driver.Request{Name: "ghost", Owner: "first", TTL: ttl}); !errors.As(err, &held) {
		t.Fatalf("acquire of a held lock: %v, want a HeldError", err)
	}
	if _, err := holder.Release(ctx, driver.Lease{Name: "ghost", Owner: "holder", TTL: ttl}, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the failed attempt's late call did not take node 4", func() bool {
		return owners(direct, key)[4] == "first"
	})
	if got := owners(direct, key); !slices.Equal(got, []string{"", "", "holder", "holder", "first"}) {
		t.Fatalf("owners before the next acquisition: %q", got)
	}
	lease := driver.Lease{Name: "ghost", Owner: "second", TTL: ttl}
	if _, err := b.Acquire(ctx, driver.Request{Name: lease.Name, Owner: lease.Owner, TTL: ttl}); err != nil {
		t.Fatalf("acquire with nodes 0, 1 and 4 free but for the failed attempt's undo: %v", err)
	}
	b.Settle()
	if got := owners(direct, key); !slices.Equal(got, []string{"second", "second", "holder", "holder", "second"}) {
		t.Fatalf("owners after the acquisition: %q", got)
	}
	if _, err := b.Release(ctx, lease, ""); err != nil {
		t.Fatal(err)
	}
}

// Inspect reads what this Backend's own acquisitions did: a re-entry returns once a majority
// counted it, and a node that has yet to count it must not make Inspect report the count
// before it. On each node Inspect waits for the Backend's acquire calls still on their way
// there.
func TestInspectWaitsForItsOwnAcquireOnEachNode(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNodes(t, 3)
	req := driver.Request{Name: "counted", Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspect(ctx, req.Name); err != nil { // its script loaded everywhere
		t.Fatal(err)
	}
	b.Settle()
	late[2].hold(500 * time.Millisecond) // the re-entry reaches node 2 late
	req.Hold = "h2"
	if g, err := b.Acquire(ctx, req); err != nil || g.Count != 2 {
		t.Fatalf("re-entry: %+v, %v", g, err)
	}
	// Inspect's majority is nodes 1 and 2: node 0 answers it late.
	late[0].hold(300 * time.Millisecond)
	info, err := b.Inspect(ctx, req.Name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Count != 2 {
		t.Fatalf("Inspect right after a re-entry returned: count %d, want 2 (node counts now %v)", info.Count, owners(direct, b.Key(req.Name)))
	}
}
