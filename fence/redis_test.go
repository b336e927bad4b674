package fence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/testserver"
)

func TestNewRedisNil(t *testing.T) {
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	for _, c := range []redis.Scripter{nil, nilClient, nilCluster} {
		if r, err := NewRedis(c); !errors.Is(err, ErrInvalid) || r != nil {
			t.Fatalf("NewRedis(%#v) = %v, %v; want ErrInvalid", c, r, err)
		}
	}
}

// TestRedis runs against a real redis-server.
func TestRedis(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	g, err := NewRedis(c)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("SetGet", func(t *testing.T) {
		const k = "doc:1"
		if _, _, err := g.Get(ctx, k); !errors.Is(err, redis.Nil) || !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get missing key = %v, want ErrNotFound and redis.Nil", err)
		}
		if err := g.Set(ctx, k, "v10", 10); err != nil {
			t.Fatal(err)
		}
		err := g.Set(ctx, k, "v9", 9)
		var se *StaleError
		if !errors.Is(err, ErrStale) || !errors.As(err, &se) {
			t.Fatalf("stale Set = %v, want ErrStale", err)
		}
		if se.Resource != k || se.Token != 9 || se.Latest != 10 {
			t.Fatalf("StaleError = %+v", *se)
		}
		v, tok, err := g.Get(ctx, k)
		if err != nil || v != "v10" || tok != 10 {
			t.Fatalf("Get = %q, %d, %v; want v10, 10 (unchanged)", v, tok, err)
		}
		if err := g.Set(ctx, k, "v10b", 10); err != nil {
			t.Fatalf("equal token: %v", err)
		}
		if err := g.Set(ctx, k, "", 11); err != nil {
			t.Fatalf("empty value: %v", err)
		}
		v, tok, err = g.Get(ctx, k)
		if err != nil || v != "" || tok != 11 {
			t.Fatalf("Get = %q, %d, %v; want \"\", 11", v, tok, err)
		}
		// Stored as an exact integer string.
		if s, err := c.HGet(ctx, k, "token").Result(); err != nil || s != "11" {
			t.Fatalf("stored token field = %q, %v", s, err)
		}
	})

	t.Run("LargeTokensExact", func(t *testing.T) {
		// Above 2^53 doubles cannot tell these apart, and above 1e14 Lua
		// 5.1's tostring() would print them in exponent form.
		const k = "doc:big"
		big := []int64{1e14 + 1, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64}
		for _, tok := range big {
			if err := g.Set(ctx, k, strconv.FormatInt(tok, 10), tok); err != nil {
				t.Fatalf("Set(%d): %v", tok, err)
			}
			if s, _ := c.HGet(ctx, k, "token").Result(); s != strconv.FormatInt(tok, 10) {
				t.Fatalf("stored %q for token %d", s, tok)
			}
		}
		err := g.Set(ctx, k, "x", math.MaxInt64-1)
		var se *StaleError
		if !errors.As(err, &se) || se.Latest != math.MaxInt64 {
			t.Fatalf("Set(MaxInt64-1) after MaxInt64 = %v, want stale with latest MaxInt64", err)
		}
		const k2 = "doc:big2"
		if err := g.Set(ctx, k2, "a", 1<<53+1); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(ctx, k2, "b", 1<<53); !errors.Is(err, ErrStale) {
			t.Fatalf("Set(2^53) after 2^53+1 = %v, want ErrStale", err)
		}
		// Shorter decimal strings are smaller numbers.
		if err := g.Set(ctx, k2, "c", 99); !errors.Is(err, ErrStale) {
			t.Fatalf("Set(99) = %v, want ErrStale", err)
		}
		if _, tok, err := g.Get(ctx, k2); err != nil || tok != 1<<53+1 {
			t.Fatalf("Get = %d, %v", tok, err)
		}
		// Same length, differing in a middle digit.
		const k3 = "doc:digits"
		if err := g.Set(ctx, k3, "a", 1920); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(ctx, k3, "b", 1910); !errors.Is(err, ErrStale) {
			t.Fatalf("Set(1910) after 1920 = %v", err)
		}
		if err := g.Set(ctx, k3, "c", 1921); err != nil {
			t.Fatalf("Set(1921) after 1920 = %v", err)
		}
	})

	t.Run("WrongType", func(t *testing.T) {
		const k = "plain-string"
		if err := c.Set(ctx, k, "hello", 0).Err(); err != nil {
			t.Fatal(err)
		}
		err := g.Set(ctx, k, "v", 1)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Set on a string key = %v, want ErrInvalid mentioning WRONGTYPE", err)
		}
		t.Logf("Set on a string key: %v", err)
		if _, _, err := g.Get(ctx, k); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Get on a string key = %v, want ErrInvalid mentioning WRONGTYPE", err)
		}
		if s, _ := c.Get(ctx, k).Result(); s != "hello" {
			t.Fatalf("string key changed to %q", s)
		}
		if err := c.RPush(ctx, "a-list", "x").Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(ctx, "a-list", "v", 1); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Set on a list key = %v", err)
		}
		// A hash that was not written by Set.
		if err := c.HSet(ctx, "foreign-hash", "token", "abc", "value", "x").Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(ctx, "foreign-hash", "v", 1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Set on a hash with a malformed token = %v, want ErrInvalid", err)
		}
		if err := c.HSet(ctx, "other-hash", "f", "x").Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := g.Get(ctx, "other-hash"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Get on a hash without fields = %v, want ErrInvalid", err)
		}
	})

	t.Run("InvalidArgs", func(t *testing.T) {
		if err := g.Set(ctx, "", "v", 1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty key: %v", err)
		}
		if err := g.Set(ctx, "k", "v", 0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("zero token: %v", err)
		}
		if err := g.Set(ctx, "k", "v", -5); !errors.Is(err, ErrInvalid) {
			t.Fatalf("negative token: %v", err)
		}
		if _, _, err := g.Get(ctx, ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Get empty key: %v", err)
		}
	})

	t.Run("ScriptCacheFlushed", func(t *testing.T) {
		// Run falls back from EVALSHA to EVAL on NOSCRIPT.
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := g.Set(ctx, "after-flush", "v", 3); err != nil {
			t.Fatal(err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if v, tok, err := g.Get(ctx, "after-flush"); err != nil || v != "v" || tok != 3 {
			t.Fatalf("Get = %q, %d, %v", v, tok, err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		const k = "contended"
		var clock, maxTok, accepted, refused atomic.Int64
		var wg sync.WaitGroup
		for gr := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(gr), 9))
				for range 100 {
					tok := max(1, clock.Add(1)-rng.Int64N(16))
					for m := maxTok.Load(); tok > m && !maxTok.CompareAndSwap(m, tok); m = maxTok.Load() {
					}
					err := g.Set(ctx, k, fmt.Sprint("v", tok), tok)
					var se *StaleError
					switch {
					case err == nil:
						accepted.Add(1)
					case errors.As(err, &se) && se.Latest > tok:
						refused.Add(1)
					default:
						t.Errorf("Set(%d): %v", tok, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		v, tok, err := g.Get(ctx, k)
		if err != nil || tok != maxTok.Load() || v != fmt.Sprint("v", tok) {
			t.Fatalf("Get = %q, %d, %v; want the max token %d and its value", v, tok, err, maxTok.Load())
		}
		if refused.Load() == 0 || accepted.Load() == 0 {
			t.Fatalf("%d accepted, %d refused: nothing exercised", accepted.Load(), refused.Load())
		}
		t.Logf("%d accepted, %d refused", accepted.Load(), refused.Load())
	})
}
