package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/internal/testmain"
)

// etcd is the single-member cluster shared by the package's tests; each test uses lock names of
// its own.
var etcd *etcdtest.Cluster

func TestMain(m *testing.M) {
	etcdtest.ServeIfAsked() // the benchmarks' etcd runs in a copy of this binary
	testmain.Run(m, func() (func(), error) {
		var err error
		if etcd, err = etcdtest.New(etcdtest.Options{}); err != nil {
			return nil, err
		}
		return etcd.Close, nil
	}, goleakOptions...)
}

// goleakOptions ignore the goroutines that etcd's and gRPC's packages start once per process.
var goleakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/traceutil"),
}

// newBackend returns a Backend on its own client, both closed when the test ends.
func newBackend(t testing.TB, c *etcdtest.Cluster, opts ...etcdbackend.Option) (*etcdbackend.Backend, *clientv3.Client) {
	cli := c.Client(t)
	b := etcdbackend.New(cli, opts...)
	t.Cleanup(func() { _ = b.Close() })
	return b, cli
}

func newLocker(t testing.TB, b fencelock.Backend) *fencelock.Client {
	c := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(2*time.Second)))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func bounded(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
