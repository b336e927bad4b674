package fencelock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testmain"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// The servers shared by the package's tests. Each test uses lock names of its own.
var (
	single *testserver.Redis

	clusterOnce sync.Once
	cluster     *testserver.Cluster
	clusterErr  error

	sentinelOnce sync.Once
	sentinel     *testserver.Sentinel
	sentinelErr  error
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	runWorkerIfAsked()
	redis.SetLogger(quietLogger{}) // go-redis reports every Sentinel switch on stderr
	testmain.Run(m, startServers)
}

// startServers starts the single server the tests share; the Cluster and Sentinel deployments
// start on first use, and stop with it.
func startServers() (stop func(), err error) {
	if single, err = testserver.NewRedis(); err != nil {
		return nil, err
	}
	stop = func() {
		_ = single.Close()
		if cluster != nil {
			_ = cluster.Close()
		}
		if sentinel != nil {
			_ = sentinel.Close()
		}
	}
	if cpu := os.Getenv("FENCELOCK_REDIS_CPU"); cpu != "" {
		// Benchmarks on a small machine: keep the server on a CPU of its own, away from the
		// benchmark (run under taskset), so wake-ups cost the same in every run.
		if out, err := exec.Command("taskset", "-a", "-p", "-c", cpu, strconv.Itoa(single.PID())).CombinedOutput(); err != nil {
			stop()
			return nil, fmt.Errorf("pinning redis-server to CPU %s: %v: %s", cpu, err, out)
		}
	}
	return stop, nil
}

// deployment is one kind of Redis deployment the tests run against.
type deployment struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

var deployments = []deployment{
	{"single", func(t *testing.T) redis.UniversalClient { return singleClient(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient {
		clusterOnce.Do(func() { cluster, clusterErr = testserver.NewCluster(3) })
		if clusterErr != nil {
			t.Fatal(clusterErr)
		}
		c := cluster.Client()
		t.Cleanup(func() { _ = c.Close() })
		return c
	}},
	{"sentinel", func(t *testing.T) redis.UniversalClient {
		sentinelOnce.Do(func() { sentinel, sentinelErr = testserver.NewSentinel() })
		if sentinelErr != nil {
			t.Fatal(sentinelErr)
		}
		c := sentinel.Client()
		t.Cleanup(func() { _ = c.Close() })
		return c
	}},
}

// forEachDeployment runs fn as a subtest against every deployment.
func forEachDeployment(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) { fn(t, d.client(t)) })
	}
}

func singleClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: single.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newLocker returns a Client over rdb that is closed when the test ends.
func newLocker(t testing.TB, rdb redisbackend.Client, opts ...fencelock.ClientOption) *fencelock.Client {
	c := fencelock.New(redisbackend.New(rdb), opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockName returns a lock name unique to the test.
func lockName(t testing.TB, suffix ...string) string {
	return strings.Join(append([]string{t.Name()}, suffix...), ":")
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor is testserver.WaitFor, under the name the tests of this package use.
var waitFor = testserver.WaitFor
