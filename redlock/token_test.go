package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// Tokens strictly increase over many acquisitions, each reaching a different random majority:
// the other nodes are cut off through proxies, so successive majorities often share one node
// only, and a node cut off for a while holds an old counter. Without the server clock in the
// token, only the counter's majority read and write keep the order: the greatest counter of a
// majority plus one would repeat tokens here.
func TestTokensIncreaseAcrossRandomMajorities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		clock bool
	}{
		{"counter", 1000, false},
		{"counter+clock", 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 120*time.Second)
			_, as := startNodes(t, 5)
			proxies, via := proxied(t, as)
			// A generous node timeout: the test is about order, not speed, and the machine may
			// be busy. The cut nodes fail at once anyway.
			opts := []redlock.Option{redlock.WithNodeTimeout(time.Second)}
			if !tc.clock {
				opts = append(opts, redlock.WithoutClockTokens())
			}
			// Two processes, taking turns.
			backends := []*redlock.Backend{
				newBackend(t, dial(t, via, noRetries), opts...),
				newBackend(t, dial(t, via, noRetries), opts...),
			}
			lockers := []*fencelock.Client{newLocker(t, backends[0]), newLocker(t, backends[1])}
			for _, c := range lockers {
				if _, err := c.Inspect(ctx, "tokens"); err != nil {
					t.Fatal(err)
				}
			}
			var last int64
			majorities := make(map[[5]bool]int)
			for i := range tc.n {
				perm := rand.Perm(5)
				var in [5]bool
				for _, k := range perm[:3] {
					in[k] = true
				}
				majorities[in]++
				for _, k := range perm[3:] {
					proxies[k].Cut()
				}
				lock, err := lockers[i%2].TryObtain(ctx, "tokens", fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
				if err != nil {
					t.Fatalf("acquisition %d on nodes %v: %v", i, perm[:3], err)
				}
				if lock.Token() <= last {
					t.Fatalf("acquisition %d on nodes %v: token %d not above %d", i, perm[:3], lock.Token(), last)
				}
				last = lock.Token()
				if err := lock.Release(ctx); err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
				// The calls to the cut nodes fail in the background; a late one must not find
				// them restored and hold them for the next acquisition.
				backends[i%2].Settle()
				for _, k := range perm[3:] {
					proxies[k].Restore()
				}
			}
			if !tc.clock && last > int64(tc.n) {
				t.Fatalf("counter tokens reached %d after %d acquisitions: more write-back rounds than expected", last, tc.n)
			}
			t.Logf("%d acquisitions over %d distinct majorities, last token %d", tc.n, len(majorities), last)
		})
	}
}

// nodeTokens returns, per node, the token in the lock's hash and the fence counter.
func nodeTokens(t *testing.T, clients []redisbackend.Client, key string) (tokens, counters []int64) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	for i, c := range clients {
		rc := c.(*redis.Client)
		tok, err := rc.HGet(ctx, key, "token").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("node %d: token: %v", i, err)
		}
		ctr, err := rc.Get(ctx, key+":fence").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("node %d: fence counter: %v", i, err)
		}
		tokens, counters = append(tokens, tok), append(counters, ctr)
	}
	return tokens, counters
}

// An owner reused across acquisitions (WithOwner) can leave its key on a node that a release
// did not reach. Another owner then takes the lock on the other nodes, with a greater token.
// When the first owner obtains again, the stale node grants it as a second hold of the old
// lock: the old token must not come back, or the store accepts the other owner's late write
// after this one's. With the clock in the token, the new one is the proposal, which the
// fresh nodes stored; without it, a token round makes it.
func TestTokenAboveAStaleKeyOfTheSameOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		clock bool
	}{{"counter+clock", true}, {"counter", false}} {
		t.Run(tc.name, func(t *testing.T) { staleKeyOfTheSameOwner(t, tc.clock) })
	}
}

func staleKeyOfTheSameOwner(t *testing.T, clock bool) {
	ctx := ctxTimeout(t, 60*time.Second)
	_, as := startNodes(t, 3)
	proxies, via := proxied(t, as)
	var bopts []redlock.Option
	if !clock {
		bopts = append(bopts, redlock.WithoutClockTokens())
	}
	direct := dial(t, as)
	bx := newBackend(t, dial(t, via, noRetries), append(bopts, redlock.WithNodeTimeout(time.Second))...)
	x := newLocker(t, bx)
	z := newLocker(t, newBackend(t, dial(t, as), bopts...))
	name := "stale-owner"
	key := bx.Key(name)
	for _, c := range []*fencelock.Client{x, z} {
		if _, err := c.Inspect(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	opts := []fencelock.Option{fencelock.WithOwner("x"), fencelock.WithTTL(10 * time.Second), fencelock.WithWatchdog(false)}

	first, err := x.TryObtain(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	bx.Settle()
	proxies[2].Cut() // node 2 does not hear the release
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bx.Settle()
	if got := owners(direct, key); !slices.Equal(got, []string{"", "", "x"}) {
		t.Fatalf("owners after the release: %q, want x on node 2 alone", got)
	}
	other, err := z.TryObtain(ctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	if other.Token() <= first.Token() {
		t.Fatalf("the other owner's token %d is not above %d", other.Token(), first.Token())
	}
	if err := other.Release(ctx); err != nil { // as good as letting it lapse
		t.Fatal(err)
	}

	// Node 1 answers last, so that the grant is decided by node 0 (fresh) and node 2 (stale).
	proxies[2].Restore()
	proxies[1].SetDelay(100 * time.Millisecond)
	again, err := x.TryObtain(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= other.Token() {
		t.Fatalf("x obtained again with token %d, not above the other owner's %d (x's first was %d)", again.Token(), other.Token(), first.Token())
	}
	var store fence.Memory
	if err := store.Check(name, again.Token()); err != nil {
		t.Fatalf("x's write: %v", err)
	}
	if err := store.Check(name, other.Token()); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the other owner's late write: %v, want ErrStale", err)
	}
	if again.HoldCount() != 1 {
		t.Fatalf("hold count %d of a new lock, want 1", again.HoldCount())
	}
	bx.Settle()
	tokens, _ := nodeTokens(t, direct, key)
	for i, tok := range tokens {
		if tok != again.Token() {
			t.Fatalf("node %d keeps token %d, the lock's is %d (all: %v)", i, tok, again.Token(), tokens)
		}
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bx.Settle()
	// Node 2 keeps the first lock's hold, which no one releases now, until its TTL: a release
	// does not drop a lock with a hold ID left in it, which may be another process's
	// (TestReleaseKeepsAnAcquisitionInFlightOfTheSameOwner). The majority is free.
	if got := owners(direct, key); !slices.Equal(got, []string{"", "", "x"}) {
		t.Fatalf("owners after the last release: %q, want x on node 2 alone", got)
	}
	next, err := z.TryObtain(ctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
	if err != nil {
		t.Fatalf("another owner after the last release: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reentrant grant whose nodes do not agree on a token (here: every node's hash says 0, as a
// token write that overtook the acquire calls left it) must not hand out a token that no
// majority stored: it makes a token as a first acquisition does, and records it on the nodes.
func TestReentrantGrantWithoutAnAgreedToken(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clients := dial(t, addrs)
	b := newBackend(t, clients)
	req := driver.Request{Name: t.Name(), Owner: "o", Hold: "h1", TTL: 10 * time.Second}
	first, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b.Settle()
	key := b.Key(req.Name)
	for _, c := range clients {
		if err := c.(*redis.Client).HSet(ctx, key, "token", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	req.Hold = "h2"
	inner, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b.Settle()
	tokens, counters := nodeTokens(t, clients, key)
	stored := 0
	for i := range clients {
		if counters[i] >= inner.Token {
			stored++
		}
	}
	if stored < b.Quorum() {
		t.Fatalf("token %d handed out, stored on %d nodes (counters %v, first token %d)", inner.Token, stored, counters, first.Token)
	}
	if inner.Token <= first.Token {
		t.Fatalf("token %d not above the first %d", inner.Token, first.Token)
	}
	for i, tok := range tokens {
		if tok != inner.Token {
			t.Fatalf("node %d keeps token %d, the lock's is %d", i, tok, inner.Token)
		}
	}
	// The lock was on every node: its hold from before stays, as it may be a live hold of the
	// owner's in another process (TestTokenRoundKeepsTheHoldsOfAnotherProcess).
	if inner.Count != 2 {
		t.Fatalf("hold count %d, want 2: the hold from before and this one", inner.Count)
	}
	lease := driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}
	if left, err := b.Release(ctx, lease, "h2"); err != nil || left != 1 {
		t.Fatalf("release of the second hold: %d left, %v; want 1", left, err)
	}
	if left, err := b.Release(ctx, lease, "h1"); err != nil || left != 0 {
		t.Fatalf("release of the first hold: %d left, %v; want 0", left, err)
	}
}

// The token round of a first acquisition waits, on each node, for the acquire call there: a
// token written to a node before the lock exists there is not recorded in the lock, which the
// late acquire then creates without a token.
func TestTokenRoundWaitsForTheAcquireOnItsNode(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	b, direct, late := lateNode(t, 4)
	warm := driver.Request{Name: "warm-up", Owner: "w", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, warm); err != nil {
		t.Fatal(err)
	}
	b.Settle()
	key := b.Key("token-round")
	ahead := time.Now().UnixMicro() + 1e12 // above every proposal: the token takes a round
	for _, c := range direct {
		if err := c.(*redis.Client).Set(ctx, key+":fence", ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	late.hold(300 * time.Millisecond)
	g, err := b.Acquire(ctx, driver.Request{Name: "token-round", Owner: "o", Hold: "h1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= ahead {
		t.Fatalf("token %d not above the counters %d", g.Token, ahead)
	}
	b.Settle()
	tokens, _ := nodeTokens(t, direct, key)
	for i, tok := range tokens {
		if tok != g.Token {
			t.Fatalf("node %d keeps token %d, the lock's is %d (all: %v)", i, tok, g.Token, tokens)
		}
	}
}

// Two goroutines of one owner obtaining a lock at once, when the first acquisition needs a
// token round (the fence counters are ahead of the proposal): each could find no lock of the
// owner's, run a round, and make the lock anew with its own token, the later ending the
// earlier's hold just handed out. Both must hold one lock, with one token.
func TestSameOwnerAcquisitionsAtOnceShareOneLock(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	_, as := startNodes(t, 3)
	direct := dial(t, as)
	b := newBackend(t, dial(t, as))
	c := newLocker(t, b)
	for round := range 30 {
		name := fmt.Sprint("at-once-", round)
		ahead := time.Now().UnixMicro() + 1e12
		for _, d := range direct {
			if err := d.(*redis.Client).Set(ctx, b.Key(name)+":fence", ahead, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var locks [2]*fencelock.Lock
		var errs [2]error
		var wg sync.WaitGroup
		for i := range locks {
			wg.Go(func() { locks[i], errs[i] = c.TryObtain(ctx, name, fencelock.WithOwner("shared")) })
		}
		wg.Wait()
		for i, l := range locks {
			if errs[i] != nil {
				t.Fatalf("round %d: %v", round, errs[i])
			}
			if err := l.Valid(); err != nil {
				t.Fatalf("round %d: a lock just handed out is lost: %v", round, err)
			}
		}
		if locks[0].Token() != locks[1].Token() {
			t.Fatalf("round %d: one owner's holds of one lock carry tokens %d and %d", round, locks[0].Token(), locks[1].Token())
		}
		for _, l := range locks {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// One owner's holds in two processes are one lock. When a reentrant acquisition in one of them
// cannot confirm the lock's token on a majority (a node answers late, another lacks the lock),
// its token round gives the lock a new token, but the other process's hold is still live: it
// must stay in the lock whichever process releases first. Else the re-entry's release deletes
// the lock under the first process's hold; or the first's release, which finds its hold absent
// under a later token on one node and the lock gone on another, takes those two for a majority
// that freed the lock and drops it on the node where the re-entry's hold is; and another owner
// takes it while the remaining hold is valid.
func TestTokenRoundKeepsTheHoldsOfAnotherProcess(t *testing.T) {
	for _, releasing := range []string{"the re-entry", "the first"} {
		t.Run(releasing, func(t *testing.T) { holdsOfAnotherProcess(t, releasing == "the first") })
	}
}

func holdsOfAnotherProcess(t *testing.T, firstReleases bool) {
	ctx := ctxTimeout(t, 60*time.Second)
	_, as := startNodes(t, 3)
	var proxies [2][]*testserver.Proxy
	var lockers [2]*fencelock.Client
	for p := range proxies {
		var via []string
		proxies[p], via = proxied(t, as)
		lockers[p] = newLocker(t, newBackend(t, dial(t, via, noRetries), redlock.WithNodeTimeout(200*time.Millisecond)))
	}
	z := newLocker(t, newBackend(t, dial(t, as)))
	name := "shared-owner"
	for _, c := range append(lockers[:], z) {
		if _, err := c.Inspect(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	opts := []fencelock.Option{fencelock.WithOwner("shared"), fencelock.WithTTL(30 * time.Second), fencelock.WithWatchdog(false)}

	proxies[0][2].Cut() // the first process holds the lock on nodes 0 and 1
	long, err := lockers[0].TryObtain(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// The second process re-enters with node 1 cut off: node 0 grants a second hold of the
	// lock, node 2 a fresh one; no token is confirmed and a round makes one.
	proxies[1][1].Cut()
	short, err := lockers[1].TryObtain(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if short.Token() <= long.Token() {
		t.Fatalf("the re-entry's token %d is not above the lock's %d", short.Token(), long.Token())
	}
	for p := range proxies {
		for _, px := range proxies[p] {
			px.Restore()
		}
	}
	released, kept := short, long
	if firstReleases {
		released, kept = long, short
	}
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kept.Valid(); err != nil {
		t.Fatalf("the other process's hold: %v", err)
	}
	other, err := z.TryObtain(ctx, name, fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
	var held *fencelock.HeldError
	if !errors.As(err, &held) {
		if err == nil {
			_ = other.Release(ctx)
		}
		t.Fatalf("another owner's TryObtain while the other process's hold is valid for %v more: %v, want a HeldError",
			time.Until(kept.ValidUntil()).Round(time.Millisecond), err)
	}
}

// Two processes of one owner take a free lock at once, and neither can confirm a token (the
// fence counters are ahead of the proposals). The first saw a first hold on every node and
// makes the lock anew in a token round, but the second's acquisition lands on the nodes
// between that process's acquire calls and its token writes: the second process holds the
// lock too, with a token of its own round. The first round's writes must keep that hold, or
// the first process's release frees the name and another owner takes it while the second
// process's hold is valid for seconds more.
func TestTokenRoundKeepsAHoldThatLandedAfterItsAcquire(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	_, as := startNodes(t, 3)
	gate := newScriptGate(redlock.FenceScript)
	gated := dial(t, as)
	for _, c := range gated {
		c.(*redis.Client).AddHook(gate)
	}
	// The first's token writes wait at the gate within its node timeout.
	first := newBackend(t, gated, redlock.WithNodeTimeout(5*time.Second))
	second := newBackend(t, dial(t, as))
	other := newBackend(t, dial(t, as))
	direct := dial(t, as)
	for _, b := range []*redlock.Backend{first, second, other} {
		if _, err := b.Inspect(ctx, "warm-up"); err != nil {
			t.Fatal(err)
		}
	}
	name := "at-once-across-processes"
	key := first.Key(name)
	ahead := time.Now().UnixMicro() + 1e12 // above every proposal: each acquisition takes a round
	for _, c := range direct {
		if err := c.(*redis.Client).Set(ctx, key+":fence", ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	req := driver.Request{Name: name, Owner: "shared", Hold: "first", TTL: 10 * time.Second}
	type result struct {
		g   driver.Grant
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		g, err := first.Acquire(ctx, req)
		firstDone <- result{g, err}
	}()
	gate.waitHeld(t, len(as)) // the first's acquire calls are done; its token writes wait
	req2 := req
	req2.Hold = "second"
	g2, err := second.Acquire(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	gate.open()
	r1 := <-firstDone
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	first.Settle()
	second.Settle()
	left, err := first.Release(ctx, driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL, Token: r1.g.Token}, req.Hold)
	if err != nil {
		t.Fatal(err)
	}
	first.Settle() // the release's calls to the nodes that answered after the majority
	g, err := other.Acquire(ctx, driver.Request{Name: name, Owner: "other", Hold: "o", TTL: 10 * time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("another owner's acquisition after the first process released (%d holds left), while the second's hold (token %d, the first's %d) is valid: %+v, %v; want a HeldError",
			left, g2.Token, r1.g.Token, g, err)
	}
	// The second process's release frees the name, though the first's round gave the lock a
	// later token than the second's grant carries.
	if left, err := second.Release(ctx, driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL, Token: g2.Token}, req2.Hold); err != nil || left != 0 {
		t.Fatalf("the second process's release: %d left, %v; want 0", left, err)
	}
	for _, b := range []*redlock.Backend{first, second, other} {
		b.Settle() // and the other owner's undo of its refused acquisition
	}
	if got := owners(direct, key); !slices.Equal(got, make([]string, len(as))) {
		t.Fatalf("owners after both released: %q", got)
	}
}

// scriptGate holds back a client's calls of one script until it is opened, and counts those
// it holds.
type scriptGate struct {
	script [2]string // SHA1 and source
	arrive chan struct{}
	opened chan struct{}
	once   sync.Once
}

func newScriptGate(script [2]string) *scriptGate {
	return &scriptGate{script: script, arrive: make(chan struct{}, 64), opened: make(chan struct{})}
}

func (g *scriptGate) open() { g.once.Do(func() { close(g.opened) }) }

// waitHeld waits until n calls are held.
func (g *scriptGate) waitHeld(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-g.arrive:
		case <-timeout:
			t.Fatalf("script calls held: fewer than %d in 10s", n)
		}
	}
}

func (g *scriptGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *scriptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == g.script[0] || args[1] == g.script[1]) {
			select {
			case <-g.opened:
			default:
				g.arrive <- struct{}{}
				select {
				case <-g.opened:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmd)
	}
}

// A re-entry in the process that holds the lock, when a node that keeps the lock fails and one
// that never had it grants a first hold: no majority shows the lock's token, but the Client
// passes the token of the lock it holds (driver.Request.Token), and the nodes' counters show
// that no greater token was handed out, so the re-entry keeps it. A token round would have made
// a new one and ended the holder's first handle as lost. With a greater counter on the
// granting nodes, the token it passed is not taken.
func TestReentryKeepsTheTokenItHolds(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("counters ahead %v", ahead), func(t *testing.T) {
			ctx := ctxTimeout(t, 60*time.Second)
			_, as := startNodes(t, 3)
			proxies, via := proxied(t, as)
			b := newBackend(t, dial(t, via, noRetries), redlock.WithNodeTimeout(200*time.Millisecond))
			c := newLocker(t, b)
			name := "reentry"
			if _, err := c.Inspect(ctx, name); err != nil {
				t.Fatal(err)
			}
			opts := []fencelock.Option{fencelock.WithOwner("o"), fencelock.WithTTL(30 * time.Second), fencelock.WithWatchdog(false)}
			proxies[2].Cut() // the lock is on nodes 0 and 1
			first, err := c.TryObtain(ctx, name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			b.Settle()
			proxies[2].Restore()
			if ahead {
				for _, d := range dial(t, as) {
					if err := d.(*redis.Client).Set(ctx, b.Key(name)+":fence", first.Token()+1000, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			proxies[1].Cut() // node 0 grants a second hold, node 2 a first one
			second, err := c.TryObtain(ctx, name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if !ahead {
				if second.Token() != first.Token() {
					t.Fatalf("the re-entry's token %d, the lock's %d", second.Token(), first.Token())
				}
				if err := first.Valid(); err != nil {
					t.Fatalf("the first handle after the re-entry: %v", err)
				}
				return
			}
			if second.Token() <= first.Token()+1000 {
				t.Fatalf("the re-entry's token %d is not above the counters %d", second.Token(), first.Token()+1000)
			}
			if err := first.Valid(); !errors.Is(err, fencelock.ErrLost) {
				t.Fatalf("the first handle, whose token is below the re-entry's: %v, want ErrLost", err)
			}
		})
	}
}

// One process of a shared owner releases while another's acquisition of the same lock is in
// flight: the acquisition has made its hold on one node, and its call to another has not
// landed yet. The release hears "free" from the node of its own hold alone and from the node
// the acquisition has not reached, and the count of the acquisition's hold from the third. It
// must not clear that node as one that keeps the lock with no hold anyone can release: the
// acquisition then lands on the other node, and holds the lock on a majority, so another
// owner must be refused.
func TestReleaseKeepsAnAcquisitionInFlightOfTheSameOwner(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	_, as := startNodes(t, 3)
	var proxies [2][]*testserver.Proxy
	var vias [2][]string
	for p := range proxies {
		proxies[p], vias[p] = proxied(t, as)
	}
	first := newBackend(t, dial(t, vias[0], noRetries))
	gate := newScriptGate(redlock.AcquireScript)
	late := dial(t, vias[1], noRetries)
	// The second's acquire call to node 2 waits at the gate within its node timeout.
	second := newBackend(t, late, redlock.WithNodeTimeout(5*time.Second))
	other := newBackend(t, dial(t, as))
	for _, b := range []*redlock.Backend{first, second, other} {
		if _, err := b.Inspect(ctx, "warm-up"); err != nil {
			t.Fatal(err)
		}
	}
	late[2].(*redis.Client).AddHook(gate)
	name := "release-beside-an-acquisition"
	req := driver.Request{Name: name, Owner: "shared", Hold: "first", TTL: 10 * time.Second}
	proxies[0][2].Cut() // the first process holds the lock on nodes 0 and 1
	g1, err := first.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first.Settle()
	proxies[0][2].Restore()
	proxies[1][0].Cut() // the second reaches nodes 1 and 2 only
	type result struct {
		g   driver.Grant
		err error
	}
	secondDone := make(chan result, 1)
	go func() {
		req2 := req
		req2.Hold = "second"
		g, err := second.Acquire(ctx, req2)
		secondDone <- result{g, err}
	}()
	gate.waitHeld(t, 1) // its hold is on node 1; its call to node 2 waits
	direct := dial(t, as)
	waitFor(t, 10*time.Second, "the second's hold on node 1", func() bool {
		n, err := direct[1].(*redis.Client).HGet(ctx, first.Key(name), "count").Int()
		return err == nil && n == 2
	})
	if _, err := first.Release(ctx, driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL, Token: g1.Token}, req.Hold); err != nil {
		t.Fatal(err)
	}
	first.Settle()
	gate.open()
	r2 := <-secondDone
	if r2.err != nil {
		t.Fatalf("the second process's acquisition: %v", r2.err)
	}
	g, err := other.Acquire(ctx, driver.Request{Name: name, Owner: "other", Hold: "o", TTL: 10 * time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("another owner's acquisition while the second process's grant (token %d, count %d) is valid: %+v, %v; want a HeldError (owners on the nodes: %q)",
			r2.g.Token, r2.g.Count, g, err, owners(direct, first.Key(name)))
	}
}
