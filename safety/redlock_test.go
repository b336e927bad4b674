package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// The Redlock stories run against five real redis-servers. Every client process of a story has
// a proxy to each node of its own, so that cutting one client's link to a node (a partition
// between that client and that node) leaves the other client's links alone.

const (
	redlockN   = 5
	redlockTTL = 2 * time.Second
	// redlockNodeTimeout is the redlock tests' own: five servers share two busy cores with a
	// race-detector build, which the 50 ms default is not meant for.
	redlockNodeTimeout = 300 * time.Millisecond
	redlockBackend     = "redlock (5 nodes)"
)

// redlockNodes are the five servers of a story, and a direct client to each for faults and
// checks, around every proxy.
type redlockNodes struct {
	servers []*testserver.Redis
	direct  []*redis.Client
}

func startRedlockNodes(t *testing.T, args ...string) *redlockNodes {
	t.Helper()
	n := &redlockNodes{}
	for range redlockN {
		s := testserver.StartRedis(t, args...)
		n.servers = append(n.servers, s)
		n.direct = append(n.direct, s.ClientT(t))
	}
	return n
}

// owners returns the owner of the lock key on each node, "" where the key is absent.
func (n *redlockNodes) owners(ctx context.Context, key string) ([]string, error) {
	out := make([]string, len(n.direct))
	for i, c := range n.direct {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := c.HGet(cctx, key, "owner").Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("node %d: %w", i, err)
		default:
			out[i] = v
		}
	}
	return out, nil
}

// checkOwners fails the test unless the lock is held on the nodes as want says, one owner (or
// "") per node: the shape the story needs.
func (n *redlockNodes) checkOwners(ctx context.Context, t *testing.T, key, what string, want []string) {
	t.Helper()
	got, err := n.owners(ctx, key)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: owners per node %q, want %q", what, got, want)
	}
}

// redlockProcess is one client process of a story: its own proxies, clients, Backend and
// Client. Close it with close.
type redlockProcess struct {
	proxies []*testserver.Proxy
	rdbs    []*redis.Client
	backend *redlock.Backend
	locker  *fencelock.Client
}

func newRedlockProcess(t *testing.T, nodes *redlockNodes, nodeTimeout time.Duration) *redlockProcess {
	t.Helper()
	p := &redlockProcess{}
	clients := make([]redisbackend.Client, len(nodes.servers))
	for i, s := range nodes.servers {
		px, err := testserver.NewProxy(s.Addr)
		if err != nil {
			p.close()
			t.Fatal(err)
		}
		p.proxies = append(p.proxies, px)
		// No retries: a call over a cut link fails at once. A retried call could otherwise
		// reach the node after the link is restored and leave a grant that nobody counted.
		c := redis.NewClient(&redis.Options{Addr: px.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		p.rdbs = append(p.rdbs, c)
		clients[i] = c
	}
	p.backend = redlock.New(clients, redlock.WithNodeTimeout(nodeTimeout))
	p.locker = fencelock.New(p.backend)
	return p
}

// warmUp has the process see every node it can reach (the backend learns their run IDs on
// first use) before the story cuts its links.
func (p *redlockProcess) warmUp(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := p.locker.Inspect(ctx, "warm-up"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
}

func (p *redlockProcess) cut(idx ...int) {
	for _, i := range idx {
		p.proxies[i].Cut()
	}
}

func (p *redlockProcess) restore(idx ...int) {
	for _, i := range idx {
		p.proxies[i].Restore()
	}
}

func (p *redlockProcess) close() {
	if p.locker != nil {
		_ = p.locker.Close()
	}
	if p.backend != nil {
		_ = p.backend.Close()
	}
	for _, c := range p.rdbs {
		_ = c.Close()
	}
	for _, px := range p.proxies {
		_ = px.Close()
	}
}

// redlockTry makes one attempt to obtain name, and another (three in all) only when the nodes
// were too slow to answer rather than the lock held: on two busy cores a node can miss its
// timeout, which is not the story under test.
func redlockTry(ctx context.Context, c *fencelock.Client, name string, opts ...fencelock.Option) (*fencelock.Lock, error) {
	var err error
	for range 3 {
		var l *fencelock.Lock
		l, err = c.TryObtain(ctx, name, opts...)
		if err == nil || errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, fencelock.ErrUnavailable) {
			return l, err
		}
	}
	return nil, err
}

// redlockObtain obtains name for the first holder of a story, waiting out slow nodes, bounded.
func redlockObtain(ctx context.Context, t *testing.T, c *fencelock.Client, name string) *fencelock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := c.Obtain(ctx, name, fencelock.WithTTL(redlockTTL))
	if err != nil {
		t.Fatalf("A's acquire: %v", err)
	}
	return l
}

// redlockRound is what one round of a story saw.
type redlockRound struct {
	obtained          bool // B obtained the lock
	doubleGrant       bool // B obtained it while A's lock still reported Valid() == nil
	refused, accepted int  // A's write after B's, at a fenced store
}

// fencedWrites has B write and then A, with their tokens, to a fenced store.
func (r *redlockRound) fencedWrites(t *testing.T, name string, a, b *fencelock.Lock) {
	t.Helper()
	var store fence.Memory
	if err := store.Check(name, b.Token()); err != nil {
		t.Fatalf("B's write with token %d: %v", b.Token(), err)
	}
	switch err := store.Check(name, a.Token()); {
	case err == nil:
		r.accepted++
		t.Errorf("%s: A's write with token %d accepted after B's with token %d", name, a.Token(), b.Token())
	case errors.Is(err, fence.ErrStale):
		r.refused++
	default:
		t.Fatal(err)
	}
}

func releaseAll(locks ...*fencelock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range locks {
		if l != nil {
			_ = l.Release(ctx)
		}
	}
}

// Scenario 7: a node of a holder's bare majority killed and restarted. Client A holds the lock
// on nodes {0,1,2} only (its links to 3 and 4 are cut during its acquire) and keeps it with the
// watchdog, as by default. One of A's nodes is killed (SIGKILL) and restarted; A's links heal;
// client B, which reaches every node, tries the lock.
//
// Restarted at once without persistence, the node comes back empty and B takes {victim, 3, 4}:
// a double grant whenever A's lock still reports itself valid then (until A's next renewal
// tells it otherwise). The fenced store must refuse A's write after B's. Restarted only after
// the TTL, A's renewals could not reach a majority meanwhile and its lock has ended: no double
// grant. With appendonly yes and appendfsync always the node comes back with A's key: B is
// refused, no double grant.
func TestRedlockRestartedNode(t *testing.T) {
	rounds := 5
	if full {
		rounds = 100
	}
	noPersistence := []string{"--save", "", "--appendonly", "no"}
	for _, tc := range []struct {
		name, setting string
		args          []string
		delayed       bool // restart after the TTL rather than at once
		persistent    bool
	}{
		{"at-once", "restart at once, no persistence", noPersistence, false, false},
		{"after-ttl", "restart after TTL + 300ms, no persistence", noPersistence, true, false},
		{"aof", "restart at once, appendonly yes, appendfsync always", []string{"--appendonly", "yes", "--appendfsync", "always"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // servers of their own; the restart after a TTL is mostly asleep
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*(redlockTTL+20*time.Second))
			defer cancel()
			nodes := startRedlockNodes(t, tc.args...)
			var obtained, doubles, refused, accepted int
			for i := range rounds {
				r := redlockRestartRound(ctx, t, nodes, fmt.Sprintf("restart-%s-%d", tc.name, i), i%3, tc.delayed, tc.persistent)
				if r.obtained {
					obtained++
				}
				if r.doubleGrant {
					doubles++
				}
				refused += r.refused
				accepted += r.accepted
			}
			t.Logf("%s: %d rounds, B obtained in %d, %d double grants, A's stale write refused %d, accepted %d",
				tc.setting, rounds, obtained, doubles, refused, accepted)
			record(outcome{Scenario: 7, Title: "a node of the holder's bare majority killed and restarted", Backend: redlockBackend,
				Setting: tc.setting, Rounds: rounds, Unit: "rounds", DoubleGrants: doubles, StaleRefused: refused, StaleAccepted: accepted,
				Note: fmt.Sprintf("B obtained in %d rounds; TTL %v, holder's watchdog on", obtained, redlockTTL)})
			switch {
			case accepted != 0:
				t.Fatalf("%d stale writes accepted by the fenced store", accepted)
			case !tc.delayed && !tc.persistent && (obtained == 0 || refused == 0):
				t.Fatalf("B obtained the lock in %d rounds and %d stale writes were refused: the story never happened", obtained, refused)
			case (tc.delayed || tc.persistent) && doubles != 0:
				t.Fatalf("%d double grants with %s", doubles, tc.setting)
			case tc.delayed && obtained == 0:
				t.Fatal("B never obtained the lock after the delayed restart: the story never happened")
			}
		})
	}
}

// redlockRestartRound runs one round of scenario 7 on nodes, killing the node victim of A's
// three.
func redlockRestartRound(ctx context.Context, t *testing.T, nodes *redlockNodes, name string, victim int, delayed, persistent bool) redlockRound {
	t.Helper()
	var r redlockRound
	a := newRedlockProcess(t, nodes, redlockNodeTimeout)
	defer a.close()
	a.warmUp(ctx, t)

	a.cut(3, 4)
	lockA := redlockObtain(ctx, t, a.locker, name)
	defer releaseAll(lockA)
	key := a.backend.Key(name)
	nodes.checkOwners(ctx, t, key, name+": A's grant", []string{lockA.Owner(), lockA.Owner(), lockA.Owner(), "", ""})

	if err := nodes.servers[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	if delayed {
		time.Sleep(redlockTTL + 300*time.Millisecond)
	}
	if err := nodes.servers[victim].Restart(); err != nil {
		t.Fatal(err)
	}
	if persistent {
		got, err := nodes.owners(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got[victim] != lockA.Owner() {
			t.Fatalf("%s: node %d came back from its append-only file without A's lock (owners %q)", name, victim, got)
		}
	} else {
		n, err := nodes.direct[victim].DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%s: node %d came back with %d keys, want none", name, victim, n)
		}
	}
	a.restore(3, 4)

	b := newRedlockProcess(t, nodes, redlockNodeTimeout)
	defer b.close()
	b.warmUp(ctx, t)
	lockB, err := redlockTry(ctx, b.locker, name, fencelock.WithTTL(redlockTTL))
	aValid := lockA.Valid() == nil
	switch {
	case errors.Is(err, fencelock.ErrNotObtained):
		return r
	case err != nil:
		t.Fatalf("%s: B's acquire: %v", name, err)
	}
	defer releaseAll(lockB)
	r.obtained, r.doubleGrant = true, aValid
	r.fencedWrites(t, name, lockA, lockB)
	return r
}

// Scenario 8: Kleppmann's clock jump. A obtains the lock on nodes {0,1,2} while its links to 3
// and 4 are cut, and keeps it with the watchdog. Node 2's clock jumps forward: its copy of the
// key expires at once (PEXPIRE key 1 stands in for the jump). B, whose links to 0 and 1 are
// cut, obtains the lock on {2,3,4}. Both believe they hold it: A's renewals reach 0 and 1
// only, which is no majority, so A cannot learn of B before its validity ends. The fenced
// store must refuse A's write after B's.
func TestRedlockClockJump(t *testing.T) {
	rounds := 5
	if full {
		rounds = 100
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*(redlockTTL+20*time.Second))
	defer cancel()
	nodes := startRedlockNodes(t)
	var doubles, refused, accepted int
	for i := range rounds {
		r := redlockClockJumpRound(ctx, t, nodes, fmt.Sprintf("clock-jump-%d", i))
		if r.doubleGrant {
			doubles++
		}
		refused += r.refused
		accepted += r.accepted
	}
	t.Logf("%d rounds: %d double grants, A's stale write refused %d, accepted %d", rounds, doubles, refused, accepted)
	record(outcome{Scenario: 8, Title: "clock jump on a node of the holder's bare majority", Backend: redlockBackend,
		Setting: "key expired early on 1 node, majorities {0,1,2} then {2,3,4}", Rounds: rounds, Unit: "rounds",
		DoubleGrants: doubles, StaleRefused: refused, StaleAccepted: accepted,
		Note: fmt.Sprintf("B obtained in every round; TTL %v, holder's watchdog on", redlockTTL)})
	if accepted != 0 {
		t.Fatalf("%d stale writes accepted by the fenced store", accepted)
	}
}

func redlockClockJumpRound(ctx context.Context, t *testing.T, nodes *redlockNodes, name string) redlockRound {
	t.Helper()
	var r redlockRound
	a := newRedlockProcess(t, nodes, redlockNodeTimeout)
	defer a.close()
	b := newRedlockProcess(t, nodes, redlockNodeTimeout)
	defer b.close()
	a.warmUp(ctx, t)
	b.warmUp(ctx, t)

	a.cut(3, 4)
	lockA := redlockObtain(ctx, t, a.locker, name)
	defer releaseAll(lockA)
	key := a.backend.Key(name)
	owner := lockA.Owner()
	nodes.checkOwners(ctx, t, key, name+": A's grant", []string{owner, owner, owner, "", ""})

	if err := nodes.direct[2].PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for nodes.direct[2].Exists(ctx, key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the key did not expire on node 2", name)
		}
		time.Sleep(time.Millisecond)
	}

	b.cut(0, 1)
	lockB, err := redlockTry(ctx, b.locker, name, fencelock.WithTTL(redlockTTL))
	aValid := lockA.Valid() == nil
	if err != nil {
		t.Fatalf("%s: B's acquire on nodes 2, 3, 4: %v", name, err)
	}
	defer releaseAll(lockB)
	nodes.checkOwners(ctx, t, key, name+": B's grant", []string{owner, owner, lockB.Owner(), lockB.Owner(), lockB.Owner()})
	r.obtained, r.doubleGrant = true, aValid
	r.fencedWrites(t, name, lockA, lockB)
	return r
}

// Scenario 9: every acquisition reaches a random majority (the acquiring client's links to
// the other two nodes are cut), two clients taking turns: successive majorities often share a
// single node, and a node cut off for a while keeps an old counter. Tokens must increase
// strictly over every acquisition.
//
// The nodes share this machine's clock, and the server clock is a term of the token, so the
// clock alone would keep tokens in order. Halfway, one node's fence counter is therefore
// pushed 10^12 µs (11.6 days) ahead of the clock, as a node whose clock ran fast would leave
// it: from the first acquisition that reads it on, the clock is far behind, and only the
// counters written back to a majority, read again by the next majority, keep the order.
func TestRedlockTokensAcrossRandomMajorities(t *testing.T) {
	n := 300
	if full {
		n = 5000
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*time.Second)
	defer cancel()
	nodes := startRedlockNodes(t)
	// A generous node timeout: the story is about order, not speed; a cut node fails at once.
	procs := []*redlockProcess{newRedlockProcess(t, nodes, time.Second), newRedlockProcess(t, nodes, time.Second)}
	for _, p := range procs {
		defer p.close()
		p.warmUp(ctx, t)
	}
	const name = "random-majorities"
	fenceKey := procs[0].backend.Key(name) + ":fence"

	var last, seed int64
	violations, waited := 0, 0
	majorities := make(map[[redlockN]bool]int)
	for i := range n {
		if i == n/2 {
			seed = redlockSeedCounter(ctx, t, nodes, fenceKey, last)
		}
		perm := rand.Perm(redlockN)
		var in [redlockN]bool
		for _, k := range perm[:3] {
			in[k] = true
		}
		majorities[in]++
		p := procs[i%2]
		p.cut(perm[3:]...)
		lock, err := redlockTry(ctx, p.locker, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
		if errors.Is(err, fencelock.ErrNotObtained) {
			// An operation returns once a majority decided, and its calls to the other nodes go
			// on. A slow acquire call of the other process may land on a node that its next
			// round then cuts off before the release that follows the call gets there: the
			// node keeps that grant for its TTL. Wait it out.
			waited++
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			lock, err = p.locker.Obtain(wctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
			cancel()
		}
		if err != nil {
			t.Fatalf("acquisition %d on nodes %v: %v", i, perm[:3], err)
		}
		if tok := lock.Token(); tok <= last {
			violations++
			t.Errorf("acquisition %d on nodes %v: token %d not above %d", i, perm[:3], tok, last)
		} else {
			last = tok
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		p.restore(perm[3:]...)
	}
	t.Logf("%d acquisitions over %d distinct majorities: %d tokens not above every earlier one; counter seeded at %d, last token %d; %d waited for a node that a late call of the other process held",
		n, len(majorities), violations, seed, last, waited)
	record(outcome{Scenario: 9, Title: "token order across random majorities", Backend: redlockBackend,
		Setting: "2 of 5 nodes cut per acquisition; halfway, a counter 10^12 µs ahead of the clock", Rounds: n, Unit: "acquisitions",
		Note: fmt.Sprintf("%d tokens not above every earlier one; %d distinct majorities", violations, len(majorities))})
	if violations != 0 {
		t.Fatalf("%d tokens were not above every earlier token", violations)
	}
	if last <= seed {
		t.Fatalf("the last token %d is not beyond the counter seeded at %d: the second half tested the clock only", last, seed)
	}
}

// redlockSeedCounter pushes the fence counter of one random node 10^12 µs beyond the greatest
// token so far and returns the new value. Some node must hold a counter by then: none means
// the key layout changed under the test, which would then seed a key nobody reads.
func redlockSeedCounter(ctx context.Context, t *testing.T, nodes *redlockNodes, fenceKey string, last int64) int64 {
	t.Helper()
	found := 0
	for i, c := range nodes.direct {
		switch err := c.Get(ctx, fenceKey).Err(); {
		case err == nil:
			found++
		case !errors.Is(err, redis.Nil):
			t.Fatalf("node %d: %v", i, err)
		}
	}
	if found == 0 {
		t.Fatalf("no node holds the fence counter %q after %d tokens", fenceKey, last)
	}
	seed := last + 1_000_000_000_000
	if err := nodes.direct[rand.IntN(redlockN)].Set(ctx, fenceKey, seed, 24*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	return seed
}
