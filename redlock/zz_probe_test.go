package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redlock"
)

func TestZZProbe(t *testing.T) {
	_, addrs := startNodes(t, 5)
	var ok, fail atomic.Int64
	var mu sync.Mutex
	errs := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		b := redlock.New(dial(t, addrs, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
		t.Cleanup(func() { _ = b.Close() })
		c := newLocker(t, b)
		for g := range 3 {
			wg.Go(func() {
				end := time.Now().Add(3 * time.Second)
				for time.Now().Before(end) {
					ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
					l, err := c.Obtain(ctx, fmt.Sprint("p", (w+g)%2), fencelock.WithTTL(2*time.Second))
					if err == nil {
						ok.Add(1)
						time.Sleep(10 * time.Millisecond)
						_ = l.Release(ctx)
					} else {
						fail.Add(1)
						mu.Lock()
						s := err.Error()
						if len(s) > 150 {
							s = s[:150]
						}
						errs[s]++
						mu.Unlock()
					}
					cancel()
				}
			})
		}
	}
	wg.Wait()
	t.Logf("ok %d fail %d", ok.Load(), fail.Load())
	for e, n := range errs {
		t.Logf("%d %s", n, e)
	}
}
