package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/redisbackend"
)

// redisAddr is the address of the redis-server the examples run against.
func redisAddr() string { return single.Addr }

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	lock, err := locker.Obtain(ctx, "order:10086", fencelock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	defer lock.Release(context.Background())

	// Work under lock.Context(): it ends if the lock is lost. Hand lock.Token() to the store.
	fmt.Println("holding", lock.Name(), "with a token:", lock.Token() > 0)
	// Output: holding order:10086 with a token: true
}

func ExampleClient_TryObtain() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	first, err := locker.TryObtain(ctx, "nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer first.Release(ctx)

	_, err = locker.TryObtain(ctx, "nightly-report")
	fmt.Println("second attempt not obtained:", errors.Is(err, fencelock.ErrNotObtained))
	// Output: second attempt not obtained: true
}

func ExampleClient_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	err := locker.Do(ctx, "charge:card-42", func(ctx context.Context) error {
		// ctx ends if the lock is lost while this runs.
		fmt.Println("charging once")
		return nil
	}, fencelock.WithTTL(10*time.Second))
	fmt.Println("err:", err)
	// Output:
	// charging once
	// err: <nil>
}

// Reentrancy: a function that locks a name can call another that locks it again.
func ExampleClient_Obtain_reentrant() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	outer, _ := locker.Obtain(ctx, "inventory:sku-1")
	inner, err := locker.Obtain(outer.Context(), "inventory:sku-1")
	fmt.Println("re-entered:", err == nil, "holds:", inner.HoldCount(), "same token:", inner.Token() == outer.Token())
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	// Output: re-entered: true holds: 2 same token: true
}

// The fencing token at the store: a holder that lost its lock without knowing it is refused.
func ExampleLock_Token() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()
	var store fence.Memory // the store's guard: it remembers the newest token per resource

	stale, _ := locker.Obtain(ctx, "stock:sku-9", fencelock.WithTTL(50*time.Millisecond), fencelock.WithWatchdog(false))
	fresh, _ := locker.Obtain(ctx, "stock:sku-9") // waits out the stale holder's TTL
	defer fresh.Release(ctx)

	fmt.Println("fresh write:", store.Check("stock:sku-9", fresh.Token()))
	err := store.Check("stock:sku-9", stale.Token())
	fmt.Println("stale write refused:", errors.Is(err, fence.ErrStale))
	// Output:
	// fresh write: <nil>
	// stale write refused: true
}

func ExampleSemaphore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	// At most 2 callers of the payment provider at once, across every instance.
	payments := locker.Semaphore("payment-provider", 2)
	first, err := payments.Acquire(ctx, fencelock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer first.Release(ctx)
	second, err := payments.Acquire(ctx, fencelock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Release(ctx)

	// Each permit is a Lock: its own token for the store, a context that ends on loss.
	_, err = payments.TryAcquire(ctx)
	fmt.Println("tokens increase:", second.Token() > first.Token())
	fmt.Println("third permit not obtained:", errors.Is(err, fencelock.ErrNotObtained))
	// Output:
	// tokens increase: true
	// third permit not obtained: true
}

func ExampleClient_ListSemaphores() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	permit, err := locker.Semaphore("report-workers", 3).Acquire(ctx, fencelock.WithMetadata("host-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer permit.Release(ctx)

	// What an operator sees: each semaphore in use, its waiters, and who holds its permits.
	sems, err := locker.ListSemaphores(ctx, "report-")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range sems {
		fmt.Printf("%s: %d of %d permits in use, %d waiting\n", s.Name, s.InUse, s.Limit, s.Waiting)
		for _, p := range s.Permits {
			fmt.Println("  held by", p.Meta+", under the permit's token:", p.Token == permit.Token())
		}
	}
	// Output:
	// report-workers: 1 of 3 permits in use, 0 waiting
	//   held by host-a, under the permit's token: true
}

func ExampleElection_Lead() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	// One instance of many runs the scheduler; when it loses its term, another one leads.
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	scheduler := locker.Election("scheduler", fencelock.WithTTL(10*time.Second))
	err := scheduler.Lead(ctx, "host-a", func(ctx context.Context, term int64) error {
		leader, _ := scheduler.Leader(ctx)
		fmt.Println("leading:", leader.Value, "in term", term == leader.Term)
		// Run until ctx ends (the term was lost, or Lead's context ended); pass term to the
		// store with every write, so that an old leader's writes are refused.
		return nil // the work is done: Lead resigns and returns
	})
	fmt.Println("done:", err)
	// Output:
	// leading: host-a in term true
	// done: <nil>
}

func ExampleRWLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	catalog := locker.RWLock("catalog")
	w, err := catalog.Lock(ctx) // alone: no reader, no other writer
	if err != nil {
		fmt.Println(err)
		return
	}
	// Downgrade: a read lock under the write lock, then the write lock goes; no writer that
	// waited meanwhile gets in between.
	r, err := catalog.RLock(w.Context())
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = w.Release(ctx)
	_, err = catalog.Lock(r.Context()) // an upgrade is refused at once
	fmt.Println("upgrade refused:", errors.Is(err, fencelock.ErrUpgrade))
	other, err := catalog.TryRLock(ctx) // readers share
	fmt.Println("another reader:", err == nil)
	_ = other.Release(ctx)
	_ = r.Release(ctx)
	// Output:
	// upgrade refused: true
	// another reader: true
}

func ExampleClient_ObtainAll() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locker := fencelock.New(redisbackend.New(rdb))
	defer locker.Close()

	// Another caller lists the same accounts the other way round: both take them in one order.
	transfer, err := locker.ObtainAll(ctx, []string{"account:B", "account:A"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range transfer.Locks() {
		fmt.Println("holding", l.Name())
	}
	_, err = locker.TryObtainAll(ctx, []string{"account:C", "account:A"})
	var me *fencelock.MultiError
	fmt.Println("second set not obtained at:", errors.As(err, &me) && me.Name == "account:A")
	if err := transfer.Release(ctx); err != nil {
		fmt.Println(err)
	}
	info, _ := locker.Inspect(ctx, "account:C")
	fmt.Println("account:C held:", info.Held)
	// Output:
	// holding account:A
	// holding account:B
	// second set not obtained at: true
	// account:C held: false
}
