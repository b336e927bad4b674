package fencelock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
)

// lostReplies wraps a real client: scripts run on the server, but while drop is above zero the
// reply is replaced with a timeout, as when a connection dies after the request went out.
type lostReplies struct {
	*redis.Client
	drop atomic.Int32
}

func (c *lostReplies) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.lose(c.Client.EvalSha(ctx, sha, keys, args...))
}

func (c *lostReplies) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return c.lose(c.Client.Eval(ctx, src, keys, args...))
}

func (c *lostReplies) lose(cmd *redis.Cmd) *redis.Cmd {
	if cmd.Err() == nil && c.drop.Add(-1) >= 0 {
		cmd.SetErr(context.DeadlineExceeded)
	}
	return cmd
}

// heldUndos are lostReplies that also hold back, until open is closed, every later script
// that names the owner of the script whose reply was lost: the undo of that acquisition, as
// when it is slow to reach the server.
type heldUndos struct {
	lostReplies
	open chan struct{}

	mu    sync.Mutex
	owner []any // the long arguments of the lost script: owner IDs
}

func (c *heldUndos) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, args, func() *redis.Cmd { return c.Client.EvalSha(ctx, sha, keys, args...) })
}

func (c *heldUndos) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, args, func() *redis.Cmd { return c.Client.Eval(ctx, src, keys, args...) })
}

func (c *heldUndos) run(ctx context.Context, args []any, script func() *redis.Cmd) *redis.Cmd {
	c.mu.Lock()
	owner := c.owner
	c.mu.Unlock()
	if slices.ContainsFunc(args, func(a any) bool { return namesOwner(a, owner) }) {
		select {
		case <-c.open:
		case <-ctx.Done():
			return redis.NewCmdResult(nil, ctx.Err())
		}
	}
	cmd := script()
	if cmd.Err() == nil && c.drop.Add(-1) >= 0 {
		c.mu.Lock()
		for _, a := range args {
			if s, ok := a.(string); ok && len(s) >= 20 {
				c.owner = append(c.owner, s)
			}
		}
		c.mu.Unlock()
		cmd.SetErr(context.DeadlineExceeded)
	}
	return cmd
}

// namesOwner reports whether the script argument a names one of owners: is one, or ends with one
// after a space (a release's hold, '<token> <hold> <owner>').
func namesOwner(a any, owners []any) bool {
	s, ok := a.(string)
	if !ok {
		return false
	}
	for _, o := range owners {
		if o := o.(string); s == o || strings.HasSuffix(s, " "+o) {
			return true
		}
	}
	return false
}

// An acquire whose reply is lost may have taken the lock: the client releases that hold with
// the same owner and hold ID, so no orphan lock waits out its TTL.
func TestAmbiguousAcquireIsCleanedUp(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	faulty := &lostReplies{Client: rdb}
	b := redisbackend.New(faulty)
	c := fencelock.New(b)
	defer c.Close()
	name := lockName(t)

	faulty.drop.Store(1)
	_, err := c.TryObtain(ctx, name, fencelock.WithTTL(time.Minute))
	if err == nil {
		t.Fatal("TryObtain succeeded though its reply was lost")
	}
	if rdb.Exists(ctx, b.Key(name)+":fence").Val() == 0 {
		t.Fatal("the acquire never reached Redis; the test proves nothing")
	}
	// The undo runs in the background, so that TryObtain returns by its deadline.
	waitFor(t, 3*time.Second, "the lock taken by the lost acquire was left behind", func() bool {
		return rdb.Exists(ctx, b.Key(name)).Val() == 0
	})
}

// A Client's next call does not meet what it is still undoing of its last: the undo of an
// acquisition whose reply was lost goes on in the background, and a TryObtain made meanwhile
// waits for it rather than be refused by its own leftover.
func TestNextCallWaitsForTheUndoOfTheLast(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	faulty := &heldUndos{lostReplies: lostReplies{Client: rdb}, open: make(chan struct{})}
	b := redisbackend.New(faulty)
	c := fencelock.New(b)
	defer c.Close()
	name := lockName(t)

	faulty.drop.Store(1)
	if _, err := c.TryObtain(ctx, name, fencelock.WithTTL(time.Minute)); err == nil {
		t.Fatal("TryObtain succeeded though its reply was lost")
	}
	if rdb.Exists(ctx, b.Key(name)).Val() == 0 {
		t.Fatal("the lost acquire did not take the lock; the test proves nothing")
	}
	// The undo is held back; a TryObtain bounded before the undo lands fails by its deadline,
	// and one that outlasts it gets the lock.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.TryObtain(short, name); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatalf("TryObtain while the undo was held back: %v, want the deadline's error", err)
	}
	time.AfterFunc(200*time.Millisecond, func() { close(faulty.open) })
	lock, err := c.TryObtain(ctx, name)
	if err != nil {
		t.Fatalf("TryObtain after its own failed acquisition: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release whose reply is lost is retried with the same hold ID; a reentrant count is
// decremented once.
func TestAmbiguousReleaseDecrementsOnce(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	rdb := singleClient(t)
	faulty := &lostReplies{Client: rdb}
	b := redisbackend.New(faulty)
	c := fencelock.New(b)
	defer c.Close()
	name := lockName(t)

	outer, err := c.Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Obtain(outer.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	faulty.drop.Store(1)
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("inner release with a lost reply: %v", err)
	}
	if n, _ := rdb.HGet(ctx, b.Key(name), "count").Int(); n != 1 {
		t.Fatalf("hold count %d after one release of two holds, want 1", n)
	}
	faulty.drop.Store(1)
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("last release with a lost reply: %v", err)
	}
	if rdb.Exists(ctx, b.Key(name)).Val() != 0 {
		t.Fatal("lock left after its last release")
	}
}
