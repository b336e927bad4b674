package rueidisconn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redisconn/rueidisconn"
)

// The one line that puts fencelock on a rueidis client: rueidisconn.New.
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	locker := fencelock.New(redisbackend.New(rueidisconn.New(client)))
	defer locker.Close()

	lock, err := locker.Obtain(context.Background(), "order:10086", fencelock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	defer lock.Release(context.Background())
	fmt.Println("holding", lock.Name(), "with a token:", lock.Token() > 0)
	// Output: holding order:10086 with a token: true
}
