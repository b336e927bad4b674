package memorybackend_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/memorybackend"
)

// A job under a lock stops when the lock is lost: Expire ends the lock as a TTL that ran out
// during a pause would, and the job's context ends at once.
func Example_jobStopsWhenItsLockIsLost() {
	ctx := context.Background()
	store := memorybackend.New()
	locker := fencelock.New(store.Backend())
	defer locker.Close()

	lock, err := locker.Obtain(ctx, "nightly-report", fencelock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)
	stopped := make(chan error)
	go func() { stopped <- runJob(lock.Context()) }()

	store.Expire("nightly-report")
	err = <-stopped
	fmt.Println("job stopped:", errors.Is(err, fencelock.ErrLost))
	// Output: job stopped: true
}

// runJob stands for a user's job: it works until its context ends, and says why it stopped.
func runJob(ctx context.Context) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// A deposed leader's write is refused by the fenced store: its term ended (Expire), another
// instance was elected with a greater term, and the store refuses the old one.
func Example_deposedLeadersWriteIsRefused() {
	ctx := context.Background()
	store := memorybackend.New()
	a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
	defer a.Close()
	defer b.Close()
	var jobs fence.Memory // the store the scheduler writes to, fenced by term

	old, err := a.Election("scheduler").Campaign(ctx, "instance a")
	if err != nil {
		panic(err)
	}
	store.Expire("scheduler") // instance a stalled past its TTL
	now, err := b.Election("scheduler").Campaign(ctx, "instance b")
	if err != nil {
		panic(err)
	}
	defer now.Resign(ctx)

	fmt.Println("new leader's write:", jobs.Check("jobs", now.Term()))
	fmt.Println("old leader's write refused:", jobs.Check("jobs", old.Term()) != nil)
	// Output:
	// new leader's write: <nil>
	// old leader's write refused: true
}

// The same kit in virtual time: inside a synctest bubble an hour-long job under a lock with a
// 30 s TTL, renewed by the watchdog all along, takes microseconds. The second instance waits
// for the first's hour, then runs.
func TestSecondInstanceWaitsThenRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		a, b := fencelock.New(store.Backend()), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		start := time.Now()
		first, err := a.Obtain(t.Context(), "nightly", fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(time.Hour) // the first instance's job
			_ = first.Release(context.Background())
		}()
		second, err := b.Obtain(t.Context(), "nightly", fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer second.Release(context.Background())
		if waited := time.Since(start); waited != time.Hour {
			t.Fatalf("the second instance ran after %v, want an hour", waited)
		}
		if second.Token() <= first.Token() {
			t.Fatalf("token %d after %d", second.Token(), first.Token())
		}
	})
}

// An instance cut off from the store (Partition) loses its lock at its validity deadline, by
// its own clock, and its job stops; the other instance gets the lock once the TTL has run out
// in the store, and the fenced store refuses the old holder. README.md's "Testing your code"
// shows this test.
func TestPartitionedInstanceStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorybackend.New()
		cut := store.Backend()
		a, b := fencelock.New(cut), fencelock.New(store.Backend())
		defer a.Close()
		defer b.Close()
		lock, err := a.Obtain(t.Context(), "nightly", fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(context.Background())
		start := time.Now()
		cut.Partition(time.Hour)
		err = runJob(lock.Context())
		if !errors.Is(err, fencelock.ErrLost) || time.Since(start) > 30*time.Second {
			t.Fatalf("the cut-off job stopped after %v with %v; want ErrLost within the TTL", time.Since(start), err)
		}
		next, err := b.Obtain(t.Context(), "nightly", fencelock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer next.Release(context.Background())
		if time.Since(start) > 30*time.Second+time.Millisecond {
			t.Fatalf("the other instance got the lock %v after the cut, want within the TTL", time.Since(start))
		}
		var jobs fence.Memory
		if jobs.Check("report", next.Token()) != nil || jobs.Check("report", lock.Token()) == nil {
			t.Fatal("the fenced store did not refuse the old holder")
		}
		cut.Partition(0)
	})
}

// The examples above run in real time, as go test runs Examples; they run unchanged in virtual
// time.
func TestExamplesInVirtualTime(t *testing.T) {
	for name, ex := range map[string]func(){
		"jobStopsWhenItsLockIsLost":    Example_jobStopsWhenItsLockIsLost,
		"deposedLeadersWriteIsRefused": Example_deposedLeadersWriteIsRefused,
	} {
		t.Run(name, func(t *testing.T) { synctest.Test(t, func(*testing.T) { ex() }) })
	}
}
