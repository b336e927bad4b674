package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// queueLen is how many waiters stand in line for name.
func queueLen(t *testing.T, rdb redis.UniversalClient, b *redisbackend.Backend, name string) int64 {
	t.Helper()
	n, err := rdb.ZCard(context.Background(), b.Key(name)+":q").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitQueueLen(t *testing.T, rdb redis.UniversalClient, b *redisbackend.Backend, name string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queueLen(t, rdb, b, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters in line for %s, want %d", queueLen(t, rdb, b, name), name, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// obtainAsync obtains name through c on a goroutine of its own; the channel yields the lock,
// or nil after reporting the error.
func obtainAsync(t *testing.T, ctx context.Context, c *fencelock.Client, name string, opts ...fencelock.Option) <-chan *fencelock.Lock {
	got := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := c.Obtain(ctx, name, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// handOver has holder take name and release it while waiter waits for it, and returns the
// waiter's lock, handed over by the release.
func handOver(t *testing.T, ctx context.Context, rdb redis.UniversalClient, b *redisbackend.Backend, holder, waiter *fencelock.Client, name string, opts ...fencelock.Option) *fencelock.Lock {
	t.Helper()
	first, err := holder.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := obtainAsync(t, ctx, waiter, name, opts...)
	waitQueueLen(t, rdb, b, name, 1)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	return l
}

// standDeadWaiter puts in line for name a waiter that then dies: a client waits with opts,
// its place is read, the client is stopped (which takes its place out), and the place is put
// back as a process that died would have left it: never to be renewed again.
func standDeadWaiter(t *testing.T, ctx context.Context, rdb redis.UniversalClient, b *redisbackend.Backend, name string, opts ...fencelock.Option) {
	t.Helper()
	before := queueLen(t, rdb, b, name)
	dead := fencelock.New(redisbackend.New(rdb))
	deadCtx, kill := context.WithCancel(ctx)
	deadDone := make(chan struct{})
	go func() {
		defer close(deadDone)
		_, _ = dead.Obtain(deadCtx, name, opts...)
	}()
	waitQueueLen(t, rdb, b, name, before+1)
	entries, err := rdb.HGetAll(ctx, b.Key(name)+":q:e").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("waiter entries %v %v", entries, err)
	}
	kill()
	<-deadDone
	dead.Close() // waits for the waiter to leave the line, which it does in the background
	waitQueueLen(t, rdb, b, name, before)
	for member, e := range entries {
		if err := rdb.ZAdd(ctx, b.Key(name)+":q", redis.Z{Score: 0, Member: member}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, b.Key(name)+":q:e", member, e).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// Waiters get the lock in the order they came, each handed it by the release before.
func TestQueueIsFIFO(t *testing.T) {
	for _, d := range []string{"single", "cluster"} {
		t.Run(d, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var rdb redis.UniversalClient
			if d == "single" {
				rdb = testserver.StartRedis(t).ClientT(t)
			} else {
				rdb = testserver.StartCluster(t, 3).ClientT(t)
			}
			b := redisbackend.New(rdb)
			const name = "fifo"
			holder := fencelock.New(b)
			defer holder.Close()
			first, err := holder.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range 5 {
				c := fencelock.New(redisbackend.New(rdb))
				defer c.Close()
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := c.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					if err := l.Release(ctx); err != nil {
						t.Error(err)
					}
				}()
				waitQueueLen(t, rdb, b, name, int64(i+1))
			}
			// No key without a TTL: the line lapses if every waiter dies.
			for _, k := range []string{b.Key(name) + ":q", b.Key(name) + ":q:e"} {
				if ttl, err := rdb.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
					t.Fatalf("PTTL %s = %v, %v", k, ttl, err)
				}
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
				t.Fatalf("waiters got the lock in the order %v", order)
			}
			if n := queueLen(t, rdb, b, name); n != 0 {
				t.Fatalf("%d waiters left in line", n)
			}
			if info, err := b.Inspect(ctx, name); err != nil || info.Held {
				t.Fatalf("after the last release: %+v %v", info, err)
			}
		})
	}
}

// The release hands the lock over inside Redis: when Release returns, the store already names
// the waiter as the holder, with a greater token, and the waiter holds it without another
// attempt of its own.
func TestReleaseHandsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	holder, waiter := fencelock.New(b), fencelock.New(redisbackend.New(rdb))
	defer holder.Close()
	defer waiter.Close()
	for i := range 20 {
		name := fmt.Sprintf("handover-%d", i)
		first, err := holder.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := obtainAsync(t, ctx, waiter, name, fencelock.WithTTL(10*time.Second), fencelock.WithOwner("waiter"), fencelock.WithMetadata("host=w"))
		waitQueueLen(t, rdb, b, name, 1)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := b.Inspect(ctx, name)
		if err != nil || info.Owner != "waiter" || info.Token <= first.Token() || info.Meta != "host=w" {
			t.Fatalf("right after the release: %+v %v (released token %d)", info, err, first.Token())
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if l.Token() != info.Token || l.Valid() != nil {
			t.Fatalf("the waiter holds token %d (valid: %v), the store says %d", l.Token(), l.Valid(), info.Token)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A release hands the lock over for as long as a place in line lives (min(TTL, 5s)): a waiter
// that died since it last renewed its place holds it that long at most, not for its TTL. A
// live waiter's watchdog extends it to its TTL at its first renewal; a waiter without a
// watchdog gets its TTL at once.
func TestHandOverLastsAPlaceUntilRenewed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	holder := fencelock.New(b)
	defer holder.Close()
	const ttl = 30 * time.Second
	const life = 5 * time.Second // maxEntryLife

	// A waiter that died in line a moment ago: its place, as its script wrote it, still lives.
	name := "dead-waiter"
	first, err := holder.Obtain(ctx, name, fencelock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	standDeadWaiter(t, ctx, rdb, b, name, fencelock.WithTTL(ttl), fencelock.WithOwner("dead"))
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Inspect(ctx, name); err != nil || info.Owner != "dead" {
		t.Fatalf("the release did not hand the lock to the dead waiter: %+v %v", info, err)
	}
	if pttl := rdb.PTTL(ctx, b.Key(name)).Val(); pttl <= 0 || pttl > life {
		t.Fatalf("the dead waiter got the lock for %v, want at most %v", pttl, life)
	}

	// A live waiter: handed the lock for the life of its place, then renewed to its TTL.
	// TTL 9s renews every 3s, so the first renewal, at most life/3 after the hand-over, is
	// the one for the short hand-over. A waiter whose own attempt, made right after it
	// subscribed, meets the hand-over confirms the lock with its whole TTL instead; the rounds
	// go on until the release's hand-over is the one the waiter has.
	name = "live-waiter"
	waiter := fencelock.New(redisbackend.New(rdb))
	defer waiter.Close()
	var l *fencelock.Lock
	for round := 1; ; round++ {
		l = handOver(t, ctx, rdb, b, holder, waiter, name, fencelock.WithTTL(9*time.Second))
		if pttl := rdb.PTTL(ctx, b.Key(name)).Val(); pttl > 0 && pttl <= life {
			break
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if round == 20 {
			t.Fatalf("in %d hand-overs the waiter never held the lock for at most %v", round, life)
		}
	}
	for deadline := time.Now().Add(life); ; time.Sleep(20 * time.Millisecond) {
		if pttl := rdb.PTTL(ctx, b.Key(name)).Val(); pttl > life {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hand-over was not renewed to the TTL within %v (PTTL %v)", life, rdb.PTTL(ctx, b.Key(name)).Val())
		}
	}
	if err := l.Valid(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Without the watchdog, nobody renews later: the Client renews the short claim at once,
	// and hands out the lock with its whole TTL.
	name = "unwatched-waiter"
	l = handOver(t, ctx, rdb, b, holder, waiter, name, fencelock.WithTTL(ttl), fencelock.WithWatchdog(false))
	if pttl := rdb.PTTL(ctx, b.Key(name)).Val(); pttl <= life {
		t.Fatalf("a waiter without a watchdog was handed the lock for %v, want its TTL %v", pttl, ttl)
	}
	if valid := time.Until(l.ValidUntil()); valid <= life {
		t.Fatalf("a waiter without a watchdog trusts the lock for %v, want about its TTL %v", valid, ttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter that gives up leaves the line; a waiter that died in it (its place not renewed) is
// passed over; with no live waiter left, the release frees the lock.
func TestQueueSkipsGoneWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	holder := fencelock.New(b)
	defer holder.Close()
	const name = "gone"
	first, err := holder.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// One gives up.
	quitter := fencelock.New(redisbackend.New(rdb))
	defer quitter.Close()
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = quitter.Obtain(short, name)
	stop()
	if !errors.Is(err, fencelock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter whose context ended: %v", err)
	}
	// It leaves in the background, so that Obtain returns by its deadline.
	waitQueueLen(t, rdb, b, name, 0)

	// One dies in line: a process stopped for good never renews its place. Its place lives
	// 200 ms.
	standDeadWaiter(t, ctx, rdb, b, name, fencelock.WithTTL(200*time.Millisecond), fencelock.WithOwner("dead"))
	live := fencelock.New(redisbackend.New(rdb))
	defer live.Close()
	got := obtainAsync(t, ctx, live, name, fencelock.WithOwner("live"))
	waitQueueLen(t, rdb, b, name, 2)
	time.Sleep(250 * time.Millisecond) // the dead waiter's place has run out
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if info, _ := b.Inspect(ctx, name); info.Owner != "live" {
		t.Fatalf("the lock went to %q", info.Owner)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Inspect(ctx, name); err != nil || info.Held {
		t.Fatalf("after the last release: %+v %v", info, err)
	}
	if n, _ := rdb.Exists(ctx, b.Key(name)+":q", b.Key(name)+":q:e").Result(); n != 0 {
		t.Fatalf("%d queue keys left", n)
	}
}

// A holder that lets its lock expire hands nothing over: the first waiter takes the lock when
// the holder's TTL has run out, and a later waiter stays in line behind it.
func TestQueueAfterExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	holder := fencelock.New(b)
	defer holder.Close()
	const name = "expiry"
	// Never renewed nor released: it expires, as a holder's that died would.
	if _, err := holder.Obtain(ctx, name, fencelock.WithTTL(300*time.Millisecond), fencelock.WithWatchdog(false)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w1, w2 := fencelock.New(redisbackend.New(rdb)), fencelock.New(redisbackend.New(rdb))
	defer w1.Close()
	defer w2.Close()
	got1 := obtainAsync(t, ctx, w1, name, fencelock.WithTTL(10*time.Second), fencelock.WithOwner("first"))
	waitQueueLen(t, rdb, b, name, 1)
	got2 := obtainAsync(t, ctx, w2, name, fencelock.WithTTL(10*time.Second), fencelock.WithOwner("second"))
	l1 := <-got1
	if l1 == nil {
		t.FailNow()
	}
	t.Logf("the first waiter held the lock %v after the holder left", time.Since(start))
	select {
	case <-got2:
		t.Fatal("the second waiter got the lock while the first held it")
	case <-time.After(100 * time.Millisecond):
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got2
	if l2 == nil || l2.Token() <= l1.Token() {
		t.Fatalf("second lock %v", l2)
	}
	_ = l2.Release(ctx)
}

// A waiter in line does not block one attempt's view: TryObtain on a held lock is refused with
// the holder's TTL, whatever the line.
func TestTryObtainWithLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	c := fencelock.New(b)
	defer c.Close()
	const name = "try-line"
	l, err := c.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w := fencelock.New(redisbackend.New(rdb))
	defer w.Close()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.Obtain(wctx, name)
	}()
	waitQueueLen(t, rdb, b, name, 1)
	other := fencelock.New(redisbackend.New(rdb))
	defer other.Close()
	_, err = other.TryObtain(ctx, name)
	var held *fencelock.HeldError
	if !errors.As(err, &held) || held.Remaining <= 0 {
		t.Fatalf("TryObtain on a held lock with a line: %v", err)
	}
	stop()
	<-done
	_ = l.Release(ctx)
}

// With WithReplicas, a lock handed over by a release is confirmed by the replicas before the
// waiter has it.
func TestHandOverWithReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testserver.StartSentinel(t)
	rdb := s.ClientT(t)
	b := redisbackend.New(rdb, redisbackend.WithReplicas(1, time.Second))
	holder, waiter := fencelock.New(b), fencelock.New(redisbackend.New(rdb, redisbackend.WithReplicas(1, time.Second)))
	defer holder.Close()
	defer waiter.Close()
	const name = "handover-replicas"
	l := handOver(t, ctx, rdb, b, holder, waiter, name, fencelock.WithTTL(10*time.Second))
	replica := s.Replica.ClientT(t)
	if owner, _ := testserver.LockOwner(ctx, replica, b.Key(name)); owner != l.Owner() {
		t.Fatalf("the replica names %q as the holder, want %q", owner, l.Owner())
	}
	// The renewal that the replica acknowledged gave the hand-over its whole TTL.
	if pttl := replica.PTTL(ctx, b.Key(name)).Val(); pttl <= 5*time.Second {
		t.Fatalf("the replica has the handed-over lock for %v, want its TTL", pttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// heldLeaves holds back every leave (the script on a line and its entries) until gate closes.
type heldLeaves struct {
	*redis.Client
	gate    chan struct{}
	entered chan struct{} // a leave came to the gate
}

func (c *heldLeaves) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if len(keys) == 2 && strings.HasSuffix(keys[0], ":q") {
		select {
		case c.entered <- struct{}{}:
		default:
		}
		<-c.gate
	}
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

// A waiter whose context ends leaves the line in the background. A release that hands it the
// lock before it has left must not leave the lock held for no one until the hand-over lapses.
func TestHandoverToADepartedWaiterIsUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	holder, other := fencelock.New(b), fencelock.New(redisbackend.New(rdb))
	defer holder.Close()
	defer other.Close()
	const name = "departed"
	first, err := holder.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	slow := &heldLeaves{Client: rdb, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	wb := redisbackend.New(slow)
	cleaned := make(chan struct{}, 1)
	waiter := fencelock.New(wb, fencelock.WithObserver(func(e fencelock.Event) {
		if e.Kind == fencelock.EventCleanup {
			select {
			case cleaned <- struct{}{}:
			default:
			}
		}
	}))
	defer waiter.Close()
	defer wb.Close()
	openGate := sync.OnceFunc(func() { close(slow.gate) })
	defer openGate() // before the Closes, which wait for the leave: a failure fails, not hangs
	// The waiter gives up once it stands in line: its context ends.
	waiting, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := waiter.Obtain(waiting, name, fencelock.WithTTL(10*time.Second))
		gaveUp <- err
	}()
	waitQueueLen(t, rdb, b, name, 1)
	giveUp()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's Obtain: %v", err)
	}
	// The Client's clean-up of the acquisition it gave up on ran; the Backend's leave is held
	// back.
	for _, c := range []chan struct{}{cleaned, slow.entered} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("no clean-up, or no leave, of the waiter that gave up")
		}
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, _ := b.Inspect(ctx, name); !info.Held {
		t.Fatal("the release handed the lock to no one: the test proves nothing")
	}
	openGate()
	deadline := time.Now().Add(2 * time.Second)
	for {
		l, err := other.TryObtain(ctx, name)
		if err == nil {
			_ = l.Release(ctx)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock handed to a waiter that had given up is still held: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A lock that expired with waiters in line and was then taken by one attempt (TryObtain) goes
// to the first waiter when that holder releases it: the release looks at the line.
func TestReleaseOfALockTakenPastTheLineHandsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := testserver.StartRedis(t)
	rdb := server.ClientT(t)
	b := redisbackend.New(rdb)
	const name = "past-the-line"
	if _, err := b.Acquire(ctx, driver.Request{Name: name, Owner: "gone", Hold: "h", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	wdb := server.ClientT(t)
	s := &sends{}
	wdb.AddHook(s)
	w := fencelock.New(redisbackend.New(wdb))
	defer w.Close()
	got := make(chan error, 1)
	go func() {
		l, err := w.Obtain(ctx, name, fencelock.WithTTL(10*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitQueueLen(t, rdb, b, name, 1)
	// The attempt that put the waiter in line, and the one it makes once it is subscribed, in
	// case a release came between them: then it sleeps.
	waitUntil(t, "the waiter's attempt again once subscribed", func() bool { return s.scripts.Load() >= 2 })
	// The holder dies: its lock expires. The waiter's next attempt is a third of its place's
	// life (5s) away.
	if err := rdb.PExpire(ctx, b.Key(name), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the holder's lock to expire", func() bool { return rdb.Exists(ctx, b.Key(name)).Val() == 0 })
	other := fencelock.New(redisbackend.New(rdb))
	defer other.Close()
	l, err := other.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("TryObtain of the expired lock: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("the release did not hand the lock to the waiter in line")
	}
}
