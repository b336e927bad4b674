package safety

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// A semaphore of 2 permits, taken by 5 clients each behind a proxy of its own while the
// proxies cut, black-hole and delay their links at random: at no instant do more than 2
// holders believe their permit valid. A holder believes from the moment Acquire returns to the
// last moment Valid() said yes; a permit whose renewals do not get through must say no by its
// validity deadline, before Redis gives its place to another.
func TestSemaphoreUnderLinkFaults(t *testing.T) {
	runPermitFaults(t, 2, func(c *fencelock.Client, _ *rand.Rand) (int, func(context.Context) (*fencelock.Lock, error)) {
		return 1, func(ctx context.Context) (*fencelock.Lock, error) {
			return c.Semaphore("sem-faults", 2).Acquire(ctx, fencelock.WithTTL(300*time.Millisecond))
		}
	})
}

// The same faults on an RWLock whose clients take read locks and, one time in three, the write
// lock: no writer ever believes itself beside another holder.
func TestRWLockUnderLinkFaults(t *testing.T) {
	runPermitFaults(t, fencelock.RWReaders, func(c *fencelock.Client, rnd *rand.Rand) (int, func(context.Context) (*fencelock.Lock, error)) {
		rw := c.RWLock("rw-faults")
		if rnd.IntN(3) == 0 {
			return fencelock.RWReaders, func(ctx context.Context) (*fencelock.Lock, error) {
				return rw.Lock(ctx, fencelock.WithTTL(300*time.Millisecond))
			}
		}
		return 1, func(ctx context.Context) (*fencelock.Lock, error) {
			return rw.RLock(ctx, fencelock.WithTTL(300*time.Millisecond))
		}
	})
}

// runPermitFaults runs 5 clients that each take what take draws (a weight and the call that
// takes it), hold it for a while and release it, under link faults, and checks that the
// weights believed valid at once never pass limit.
func runPermitFaults(t *testing.T, limit int, take func(*fencelock.Client, *rand.Rand) (int, func(context.Context) (*fencelock.Lock, error))) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients, ttl = 5, 300 * time.Millisecond
	run := 8 * time.Second
	if full {
		run = 40 * time.Second
	}
	seed := rand.Uint64() % 1_000_000_000
	if raw := os.Getenv("FENCELOCK_SEMAPHORE_SEED"); raw != "" {
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			t.Fatalf("FENCELOCK_SEMAPHORE_SEED=%q: %v", raw, err)
		}
		seed = n
	}
	t.Logf("seed %d (replay: FENCELOCK_SEMAPHORE_SEED=%d go test -race -run '%s$' ./safety/)", seed, seed, t.Name())
	r := testserver.StartRedis(t)

	type span struct {
		from, to time.Time // Acquire returned; Valid() last said yes
		token    int64
		weight   int
	}
	var mu sync.Mutex
	var spans []span
	var proxies []*testserver.Proxy
	var wg sync.WaitGroup
	until := time.Now().Add(run)
	for i := range clients {
		proxy := testserver.StartProxy(t, r.Addr)
		proxies = append(proxies, proxy)
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		c := fencelock.New(redisbackend.New(rdb))
		t.Cleanup(func() { _ = c.Close() })
		rnd := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			for time.Now().Before(until) {
				weight, acquire := take(c, rnd)
				actx, acancel := context.WithTimeout(ctx, time.Second)
				p, err := acquire(actx)
				acancel()
				if err != nil {
					continue
				}
				s := span{from: time.Now(), token: p.Token(), weight: weight}
				for end := time.Now().Add(time.Duration(rnd.IntN(600)) * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
					now := time.Now()
					if p.Valid() != nil {
						break
					}
					s.to = now
				}
				if !s.to.IsZero() {
					mu.Lock()
					spans = append(spans, s)
					mu.Unlock()
				}
				rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_ = p.Release(rctx)
				rcancel()
			}
		})
	}
	// The nemesis: one fault at a time on a random link, lasting up to 1.5×TTL.
	faults := 0
	rnd := rand.New(rand.NewPCG(seed, 99))
	for time.Now().Before(until) {
		time.Sleep(time.Duration(50+rnd.IntN(300)) * time.Millisecond)
		p := proxies[rnd.IntN(len(proxies))]
		switch rnd.IntN(3) {
		case 0:
			p.Cut()
		case 1:
			p.Blackhole()
		case 2:
			p.SetDelay(time.Duration(rnd.IntN(int(ttl/time.Millisecond))) * time.Millisecond)
		}
		faults++
		time.Sleep(time.Duration(rnd.IntN(int(3*ttl/2/time.Millisecond))) * time.Millisecond)
		p.SetDelay(0)
		p.Restore()
	}
	wg.Wait()

	// Sweep the spans' ends in time order: the count of believers never passes the limit.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	tokens := map[int64]bool{}
	for _, s := range spans {
		if tokens[s.token] {
			t.Errorf("token %d granted twice", s.token)
		}
		tokens[s.token] = true
		edges = append(edges, edge{s.from, s.weight}, edge{s.to, -s.weight})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	most, n, shared := 0, 0, 0 // shared: the most permits below the limit believed valid at once
	for _, e := range edges {
		n += e.delta
		if n > limit {
			t.Errorf("at %v, holders of %d permits of %d believed them valid", e.at.Format("15:04:05.000"), n, limit)
		}
		most = max(most, n)
		if n < limit {
			shared = max(shared, n)
		}
	}
	t.Logf("seed %d: %d grants held and checked over %v, %d link faults; at most %d permits believed valid at once", seed, len(spans), run, faults, most)
	if len(spans) < 10 || faults < 5 || most < limit || shared < min(2, limit-1) {
		t.Fatalf("the run tested too little: %d grants, %d faults, at most %d permits at once, at most %d below the limit", len(spans), faults, most, shared)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the run outlived its bound")
	}
}
