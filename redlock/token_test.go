package redlock_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redlock"
)

// Tokens strictly increase over many acquisitions, each reaching a different random majority:
// the other nodes are cut off through proxies, so successive majorities often share one node
// only, and a node cut off for a while holds an old counter. Without the server clock in the
// token, only the counter's majority read and write keep the order: the greatest counter of a
// majority plus one would repeat tokens here.
func TestTokensIncreaseAcrossRandomMajorities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		clock bool
	}{
		{"counter", 1000, false},
		{"counter+clock", 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 120*time.Second)
			_, as := startNodes(t, 5)
			proxies := make([]*testserver.Proxy, len(as))
			via := make([]string, len(as))
			for i, a := range as {
				proxies[i] = testserver.StartProxy(t, a)
				via[i] = proxies[i].Addr
			}
			// A generous node timeout: the test is about order, not speed, and the machine may
			// be busy. The cut nodes fail at once anyway.
			opts := []redlock.Option{redlock.WithNodeTimeout(time.Second)}
			if !tc.clock {
				opts = append(opts, redlock.WithoutClockTokens())
			}
			// Two processes, taking turns.
			backends := []*redlock.Backend{
				newBackend(t, dial(t, via, noRetries), opts...),
				newBackend(t, dial(t, via, noRetries), opts...),
			}
			lockers := []*fencelock.Client{newLocker(t, backends[0]), newLocker(t, backends[1])}
			for _, c := range lockers {
				if _, err := c.Inspect(ctx, "tokens"); err != nil {
					t.Fatal(err)
				}
			}
			var last int64
			majorities := make(map[[5]bool]int)
			for i := range tc.n {
				perm := rand.Perm(5)
				var in [5]bool
				for _, k := range perm[:3] {
					in[k] = true
				}
				majorities[in]++
				for _, k := range perm[3:] {
					proxies[k].Cut()
				}
				lock, err := lockers[i%2].TryObtain(ctx, "tokens", fencelock.WithTTL(10*time.Second), fencelock.WithWatchdog(false))
				if err != nil {
					t.Fatalf("acquisition %d on nodes %v: %v", i, perm[:3], err)
				}
				if lock.Token() <= last {
					t.Fatalf("acquisition %d on nodes %v: token %d not above %d", i, perm[:3], lock.Token(), last)
				}
				last = lock.Token()
				if err := lock.Release(ctx); err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
				// The calls to the cut nodes fail in the background; a late one must not find
				// them restored and hold them for the next acquisition.
				backends[i%2].Settle()
				for _, k := range perm[3:] {
					proxies[k].Restore()
				}
			}
			if !tc.clock && last > int64(tc.n) {
				t.Fatalf("counter tokens reached %d after %d acquisitions: more write-back rounds than expected", last, tc.n)
			}
			t.Logf("%d acquisitions over %d distinct majorities, last token %d", tc.n, len(majorities), last)
		})
	}
}
