package zkbackend_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/zkbackend"
)

func Example() {
	servers := []string{server.Addr} // your ensemble
	const sessionTimeout = 2 * time.Second
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(quietLogger{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	// The session timeout is the lock's real TTL: tell the backend, and renew within it.
	backend := zkbackend.New(conn, zkbackend.WithSessionTimeout(sessionTimeout))
	defer backend.Close() // before the connection: it makes the releases it still owes
	locker := fencelock.New(backend, fencelock.WithDefaults(fencelock.WithTTL(sessionTimeout)))
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "order:10086")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held by us:", lock.Context().Err() == nil)

	_, err = locker.TryObtain(ctx, "order:10086")
	fmt.Println("someone else gets it:", !errors.Is(err, fencelock.ErrNotObtained))

	// The store refuses writes with a token older than one it has seen.
	var stock fence.Memory
	err = stock.Do("stock:10086", lock.Token(), func() error { return nil })
	fmt.Println("fenced write:", err)

	if err := lock.Release(ctx); err != nil {
		fmt.Println(err)
	}
	info, _ := locker.Inspect(ctx, "order:10086")
	fmt.Println("held after release:", info.Held)

	// Output:
	// held by us: true
	// someone else gets it: false
	// fenced write: <nil>
	// held after release: false
}
