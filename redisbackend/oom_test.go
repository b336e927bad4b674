package redisbackend_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// A Redis out of memory under noeviction (the policy `fencelock doctor` recommends) refuses
// writes until memory is freed: that passes, so an acquisition fails with ErrUnavailable, and
// Obtain waits on through it. It was bad input: ErrInvalid, "Redis refused: OOM", and Obtain
// with 30 s to go gave up at once.
func TestOutOfMemoryIsTransient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := testserver.StartRedis(t)
	rdb := r.ClientT(t)
	c := fencelock.New(redisbackend.New(rdb))
	defer c.Close()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "ballast", strings.Repeat("x", 1<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil { // below what is used
		t.Fatal(err)
	}
	defer rdb.ConfigSet(context.Background(), "maxmemory", "0")
	_, err := c.TryObtain(ctx, "oom")
	if !errors.Is(err, fencelock.ErrUnavailable) || errors.Is(err, fencelock.ErrInvalid) || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("TryObtain on a full server: %v; want ErrUnavailable, not ErrInvalid, saying it is out of memory", err)
	}
	refused := oomRefusals(t, ctx, rdb)
	got := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, "oom")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// Memory is freed once the waiter was refused at least once more.
	for oomRefusals(t, ctx, rdb) == refused {
		select {
		case err := <-got:
			t.Fatalf("Obtain on a full server returned before memory was freed: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Obtain once memory was freed: %v", err)
	}
}

// oomRefusals is how many commands the server refused for want of memory.
func oomRefusals(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_OOM:count="); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				t.Fatalf("errorstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
