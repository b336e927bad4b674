package redisbackend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// sends counts what a go-redis client sends: commands on their own and pipelines, and can
// hold back the next command on its own for a while.
type sends struct {
	single, pipelines, piped atomic.Int64
	holdNext                 atomic.Bool
	holding                  chan struct{} // receives when a held command starts waiting
	hold                     time.Duration
	holdPipes                time.Duration // how long each pipeline of scripts is held back
	pipeDone                 atomic.Bool   // set when a pipeline of scripts came back
	scripts                  atomic.Int64  // scripts sent on their own that the server ran
}

func (s *sends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.single.Add(1)
		if s.holdNext.CompareAndSwap(true, false) {
			s.holding <- struct{}{}
			time.Sleep(s.hold)
		}
		err := next(ctx, cmd)
		if err == nil && strings.HasPrefix(cmd.Name(), "eval") {
			s.scripts.Add(1)
		}
		return err
	}
}

func (s *sends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.pipelines.Add(1)
		s.piped.Add(int64(len(cmds)))
		script := len(cmds) > 0 && strings.HasPrefix(cmds[0].Name(), "eval")
		if script {
			time.Sleep(s.holdPipes)
		}
		err := next(ctx, cmds)
		if script {
			s.pipeDone.Store(true)
		}
		return err
	}
}

// With pipelining, calls that arrive while the slots are taken go out together: every one of
// them gets its own right answer, scripts that the server lost are loaded again, and nothing
// stays held.
func TestPipelinedCallsShareRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	s := &sends{}
	rdb.AddHook(s)
	b := redisbackend.New(rdb, redisbackend.WithPipelining(1))
	c := fencelock.New(b)
	defer c.Close()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil { // the first batch meets NOSCRIPT
		t.Fatal(err)
	}

	const goroutines, cycles = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			name := fmt.Sprintf("piped-%d", g)
			var last int64
			for i := range cycles {
				l, err := c.TryObtain(ctx, name, fencelock.WithWatchdog(false))
				if err != nil {
					errs <- fmt.Errorf("%s cycle %d: %w", name, i, err)
					return
				}
				if l.Token() <= last {
					errs <- fmt.Errorf("%s cycle %d: token %d not above %d", name, i, l.Token(), last)
				}
				last = l.Token()
				// Another owner is refused while it is held, also when its call is batched.
				if _, err := b.Acquire(ctx, driver.Request{Name: name, Owner: "intruder", TTL: time.Second}); !errors.Is(err, fencelock.ErrNotObtained) {
					errs <- fmt.Errorf("%s cycle %d: another owner's acquire: %v", name, i, err)
				}
				if err := l.Release(ctx); err != nil {
					errs <- fmt.Errorf("%s cycle %d: release: %w", name, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := s.pipelines.Load(); n == 0 {
		t.Fatalf("no pipeline was sent for %d concurrent goroutines with one slot", goroutines)
	}
	t.Logf("%d commands on their own, %d pipelines carrying %d commands", s.single.Load(), s.pipelines.Load(), s.piped.Load())
	keys, err := rdb.Keys(ctx, "fencelock:{piped-*}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("locks left behind: %v", keys)
	}
}

// A call still waiting for a slot when its context ends returns the context's error and was
// never sent.
func TestQueuedCallLeavesOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	s := &sends{holding: make(chan struct{}, 1), hold: 500 * time.Millisecond}
	rdb.AddHook(s)
	b := redisbackend.New(rdb, redisbackend.WithPipelining(1))
	req := driver.Request{Name: "first", Owner: "o", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil { // loads the script
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL}, ""); err != nil {
		t.Fatal(err)
	}

	s.pipelines.Store(0) // the connection's handshake is one
	s.holdNext.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, req)
		first <- err
	}()
	<-s.holding // the first call has the only slot, and is held back
	qctx, qcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer qcancel()
	_, err := b.Acquire(qctx, driver.Request{Name: "queued", Owner: "o", TTL: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call whose context ended: %v, want context.DeadlineExceeded", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, b.Key("queued")).Result(); err != nil || n != 0 {
		t.Fatalf("the cancelled call took the lock: exists %d, %v", n, err)
	}
	if s.pipelines.Load() != 0 {
		t.Fatalf("%d pipelines sent; the cancelled call must not have been", s.pipelines.Load())
	}
}

// A call sent in a batch returns when its own context ends, with the context's error, though
// the batch is still on its way for a caller with a later deadline. (It used to wait for the
// batch, which ends by its latest deadline: a nemesis run saw calls return 800 ms late.)
func TestBatchedCallReturnsByItsOwnDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	s := &sends{holding: make(chan struct{}, 1), hold: 200 * time.Millisecond}
	rdb.AddHook(s)
	b := redisbackend.New(rdb, redisbackend.WithPipelining(1))
	defer b.Close()
	req := driver.Request{Name: "slot", Owner: "o", TTL: 10 * time.Second}
	if _, err := b.Acquire(ctx, req); err != nil { // loads the script
		t.Fatal(err)
	}
	s.holdPipes = time.Second
	s.holdNext.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, driver.Request{Name: "first", Owner: "o", TTL: 10 * time.Second})
		first <- err
	}()
	<-s.holding // the first call has the only slot, and is held back 200 ms
	later := make(chan error, 1)
	go func() {
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		defer lcancel()
		_, err := b.Acquire(lctx, driver.Request{Name: "later", Owner: "o", TTL: 10 * time.Second})
		later <- err
	}()
	sctx, scancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer scancel()
	_, err := b.Acquire(sctx, driver.Request{Name: "sooner", Owner: "o", TTL: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("batched call whose context ended: %v, want context.DeadlineExceeded", err)
	}
	if s.pipeDone.Load() {
		t.Fatal("the call returned only after its batch came back: want it back at its own deadline")
	}
	if s.pipelines.Load() == 0 {
		t.Fatal("no batch was sent: the test did not put the call in one")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatalf("the batch's other call: %v", err)
	}
}

func TestPipeliningOption(t *testing.T) {
	rdb := testserver.StartRedis(t).ClientT(t)
	_, err := redisbackend.New(rdb, redisbackend.WithPipelining(-1)).Acquire(context.Background(), driver.Request{Name: "n", Owner: "o", TTL: time.Second})
	if !errors.Is(err, fencelock.ErrInvalid) {
		t.Fatalf("WithPipelining(-1): %v, want ErrInvalid", err)
	}
}
