package fencelock_test

import (
	"context"
	"errors"
	"log/slog"
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

// The lock, its fence counter and its release channel share one Cluster slot.
func TestKeysShareSlot(t *testing.T) {
	for _, d := range deployments {
		if d.name != "cluster" {
			continue
		}
		rdb := d.client(t)
		ctx := ctxTimeout(t, 10*time.Second)
		b := redisbackend.New(rdb.(*redis.ClusterClient), redisbackend.WithPrefix("app:"))
		if _, err := b.Acquire(ctx, driver.Request{Name: "}x", Owner: "o", Hold: "h", TTL: time.Second}); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("a name starting with '}' empties the hash tag; got %v, want ErrInvalid", err)
		}
		for _, name := range []string{"order:10086", "a}b", "{x}", "x{y}z", "{"} {
			key := b.Key(name)
			want := rdb.ClusterKeySlot(ctx, key).Val()
			for _, k := range []string{key + ":fence", key + ":released"} {
				if got := rdb.ClusterKeySlot(ctx, k).Val(); got != want {
					t.Errorf("%q: slot %d, lock slot %d", k, got, want)
				}
			}
		}
	}
}

// WithReplicas fails an acquisition that too few replicas acknowledged, and leaves no lock.
func TestReplicaAcknowledgement(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	t.Run("no replica", func(t *testing.T) {
		rdb := singleClient(t)
		b := redisbackend.New(rdb, redisbackend.WithReplicas(1, 50*time.Millisecond))
		c := fencelock.New(b)
		defer c.Close()
		name := lockName(t)
		_, err := c.TryObtain(ctx, name)
		if !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("got %v, want ErrUnavailable", err)
		}
		// The Client releases it in the background, so that TryObtain returns by its deadline.
		waitFor(t, 3*time.Second, "the unacknowledged lock was left behind", func() bool {
			return rdb.Exists(ctx, b.Key(name)).Val() == 0
		})
	})
	t.Run("sentinel replica", func(t *testing.T) {
		rdb := deployments[2].client(t)
		c := fencelock.New(redisbackend.New(rdb.(*redis.Client), redisbackend.WithReplicas(1, time.Second)))
		defer c.Close()
		lock, err := c.TryObtain(ctx, lockName(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cluster without replicas", func(t *testing.T) {
		rdb := deployments[1].client(t)
		c := fencelock.New(redisbackend.New(rdb.(*redis.ClusterClient), redisbackend.WithReplicas(1, 20*time.Millisecond)))
		defer c.Close()
		if _, err := c.TryObtain(ctx, lockName(t)); !errors.Is(err, fencelock.ErrUnavailable) {
			t.Fatalf("got %v", err)
		}
	})
}

// A Sentinel failover while a lock is held. With WithReplicas(1) the lock had reached the
// replica before it was granted, so the promoted replica has it: the lock survives, renewals
// go to the new master, and no one else can take it.
func TestSentinelFailoverWhileHeld(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	s := testserver.StartSentinel(t)
	rdb := s.ClientT(t)
	b := redisbackend.New(rdb, redisbackend.WithReplicas(1, time.Second))
	c := fencelock.New(b)
	defer c.Close()
	other := newLocker(t, s.ClientT(t))
	name := lockName(t)
	const ttl = 6 * time.Second
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.CurrentMaster(ctx)
	after, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatalf("master still %s", after)
	}
	time.Sleep(ttl) // several renewal intervals on the new master
	if err := lock.Context().Err(); err != nil {
		t.Fatalf("lock lost across the failover: %v", err)
	}
	direct := redis.NewClient(&redis.Options{Addr: after})
	defer direct.Close()
	if owner, _ := testserver.LockOwner(ctx, direct, b.Key(name)); owner != lock.Owner() {
		t.Fatalf("new master %s has owner %q, want ours", after, owner)
	}
	if pttl := direct.PTTL(ctx, b.Key(name)).Val(); pttl <= 0 {
		t.Fatalf("lock on the new master has PTTL %v", pttl)
	}
	if _, err := other.TryObtain(ctx, name); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("another client took the lock after failover: %v", err)
	}
	next, err := other.Obtain(ctx, name, fencelock.WithWaitTimeout(0))
	if err == nil {
		t.Fatalf("obtained with token %d while held", next.Token())
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err = other.TryObtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lock.Token() {
		t.Fatalf("token %d after failover not above %d", next.Token(), lock.Token())
	}
	_ = next.Release(ctx)
}

// The observer hears of every step, with durations; nothing is logged without one.
func TestObserver(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	seen := make(chan fencelock.Event, 100)
	renewed := make(chan struct{}, 1)
	c := newLocker(t, singleClient(t), fencelock.WithObserver(func(e fencelock.Event) {
		select {
		case seen <- e:
		default:
		}
		if e.Kind == fencelock.EventRenewed {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}))
	name := lockName(t)
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-renewed: // the first renewal, at TTL/3
	case <-ctx.Done():
		t.Fatal("no renewal")
	}
	_, _ = c.TryObtain(context.WithoutCancel(ctx), name, fencelock.WithOwner("other"))
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	kinds := map[fencelock.EventKind]int{}
	for len(seen) > 0 {
		e := <-seen
		if e.Name != name {
			t.Errorf("event for %q", e.Name)
		}
		kinds[e.Kind]++
	}
	for _, k := range []fencelock.EventKind{fencelock.EventObtained, fencelock.EventRenewed, fencelock.EventNotObtained, fencelock.EventReleased} {
		if kinds[k] == 0 {
			t.Errorf("no %v event; saw %v", k, kinds)
		}
	}
}

// WithLogger writes events to a slog handler at debug level, and losses at warn level.
func TestLogger(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	var buf strings.Builder
	var mu sync.Mutex
	h := slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	rdb := singleClient(t)
	b := redisbackend.New(rdb)
	c := newLocker(t, rdb, fencelock.WithLogger(h))
	name := lockName(t)
	lock, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, b.Key(name))
	_ = lock.Refresh(ctx, 0)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{`msg="fencelock: obtained"`, `level=WARN msg="fencelock: lost"`, "lock=" + name} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
