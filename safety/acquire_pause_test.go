package safety

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Scenario 2: the reply to an acquire arrives 1.5×TTL after the request left (a client paused,
// or a slow network, mid-acquire). No acquisition may be reported valid once its elapsed time
// exceeds its validity: the lock it returns must already say it is lost.
func TestPausedMidAcquire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, r.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	c := fencelock.New(redisbackend.New(rdb))
	defer c.Close()
	const ttl = 200 * time.Millisecond
	rounds := 10
	if full {
		rounds = 200
	}
	reportedValid, refused := 0, 0
	for i := 0; i < rounds; i++ {
		proxy.SetDelay(3 * ttl / 4) // each way: the reply lands 1.5×TTL after the request left
		start := time.Now()
		lock, err := c.TryObtain(ctx, "mid-acquire-"+strconv.Itoa(i), fencelock.WithTTL(ttl))
		elapsed := time.Since(start)
		proxy.SetDelay(0)
		switch {
		case errors.Is(err, fencelock.ErrUnavailable):
			refused++ // the grant came too late, and was undone
			continue
		case err != nil:
			t.Fatal(err)
		}
		if elapsed > ttl && lock.Valid() == nil {
			reportedValid++
		}
		_ = lock.Release(ctx)
	}
	t.Logf("%d acquisitions with the reply 1.5×TTL late: %d refused as late, %d reported valid", rounds, refused, reportedValid)
	record(outcome{Scenario: 2, Title: "acquire reply 1.5×TTL late", Backend: "redis", Setting: "proxy delay", Rounds: rounds, Unit: "acquisitions",
		Note: fmt.Sprintf("%d reported valid past their validity; %d undone as late", reportedValid, refused)})
	if reportedValid != 0 {
		t.Fatalf("%d acquisitions were reported valid after their validity had passed", reportedValid)
	}
}
