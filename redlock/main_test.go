package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testmain"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
)

// addrs are five independent Redis servers shared by the tests that do not hurt them; each
// test uses lock names of its own. Fault tests start servers of their own.
var addrs []string

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis reports every refused connection on stderr
	testmain.Run(m, func() (func(), error) {
		var servers []*testserver.Redis
		stop := func() {
			for _, s := range servers {
				_ = s.Close()
			}
		}
		for range 5 {
			r, err := testserver.NewRedis()
			if err != nil {
				stop()
				return nil, err
			}
			servers = append(servers, r)
			addrs = append(addrs, r.Addr)
		}
		return stop, nil
	})
}

// dial returns one go-redis client per address, closed when the test ends. They honour
// context deadlines, so that a node timeout ends the call itself, not only the wait for it.
func dial(t testing.TB, addrs []string, tweak ...func(*redis.Options)) []redisbackend.Client {
	out := make([]redisbackend.Client, len(addrs))
	for i, a := range addrs {
		opt := &redis.Options{Addr: a, ContextTimeoutEnabled: true}
		for _, f := range tweak {
			f(opt)
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

// proxied starts a TCP proxy to each address, and returns them with their addresses.
func proxied(t testing.TB, addrs []string) ([]*testserver.Proxy, []string) {
	proxies := make([]*testserver.Proxy, len(addrs))
	via := make([]string, len(addrs))
	for i, a := range addrs {
		proxies[i] = testserver.StartProxy(t, a)
		via[i] = proxies[i].Addr
	}
	return proxies, via
}

// noRetries makes a client fail at once on a cut connection instead of retrying it.
func noRetries(o *redis.Options) { o.MaxRetries = -1 }

// startNodes starts n servers of the test's own.
func startNodes(t testing.TB, n int) ([]*testserver.Redis, []string) {
	servers := make([]*testserver.Redis, n)
	as := make([]string, n)
	for i := range servers {
		servers[i] = testserver.StartRedis(t)
		as[i] = servers[i].Addr
	}
	return servers, as
}

// newBackend returns a Backend closed when the test ends. Its node timeout is 300 ms unless
// opts say otherwise: the 50 ms default is for dedicated servers, not for five redis-servers
// sharing two cores with a race-detector build and other packages' tests.
func newBackend(t testing.TB, clients []redisbackend.Client, opts ...redlock.Option) *redlock.Backend {
	opts = append([]redlock.Option{redlock.WithNodeTimeout(300 * time.Millisecond)}, opts...)
	b := redlock.New(clients, opts...)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func newLocker(t testing.TB, b fencelock.Backend, opts ...fencelock.ClientOption) *fencelock.Client {
	c := fencelock.New(b, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// owners returns the owner of the lock's key on each node, "" where it is absent or the node
// does not answer.
func owners(clients []redisbackend.Client, key string) []string {
	out := make([]string, len(clients))
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		out[i], _ = c.(*redis.Client).HGet(ctx, key, "owner").Result()
		cancel()
	}
	return out
}

// waitFor is testserver.WaitFor, under the name the tests of this package use.
var waitFor = testserver.WaitFor

// waitListening waits until at least n of nodes count a subscriber of channel: a waiter whose
// WatchRelease returned listens on a majority of the nodes.
func waitListening(t testing.TB, nodes []redisbackend.Client, channel string, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d nodes with a subscriber of %s", n, channel), func() bool {
		count := 0
		for _, c := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			subs, err := c.(*redis.Client).PubSubNumSub(ctx, channel).Result()
			cancel()
			if err == nil && subs[channel] > 0 {
				count++
			}
		}
		return count >= n
	})
}
