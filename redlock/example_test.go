package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

func Example() {
	ctx := context.Background()
	// addrs: five independent Redis servers.
	clients := make([]redisbackend.Client, len(addrs))
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		clients[i] = rdb
	}
	b := redlock.New(clients)
	defer b.Close()
	locker := fencelock.New(b)
	defer locker.Close()

	lock, err := locker.Obtain(ctx, "example:invoice-42", fencelock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err) // errors.Is(err, fencelock.ErrUnavailable) when a majority is down
		return
	}
	defer lock.Release(ctx)
	fmt.Printf("held on a majority of %d nodes (%d needed), token > 0: %v\n", b.Nodes(), b.Quorum(), lock.Token() > 0)
	// Output: held on a majority of 5 nodes (3 needed), token > 0: true
}
