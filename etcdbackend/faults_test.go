package etcdbackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
)

// fault is what happens to one call of a real etcd client.
type fault int

const (
	pass fault = iota // the call goes through
	fail              // the call fails before it is sent, as over a cut link
	lose              // the call is sent and applied, and its reply is lost
)

var errInjected = errors.New("injected fault: connection reset")

// faults fails chosen calls of a real etcd client: its Get and Txn commits, and its lease
// TimeToLive. Calls made under a context from planned take the next step of the planned
// lane; every other call (the Backend's own background work) takes the next step of the
// background lane, and then the background lane's rest.
type faults struct {
	mu         sync.Mutex // guards the lanes
	planned    []fault
	background []fault
	rest       fault
}

type plannedKey struct{}

// planned marks ctx: calls made under it take the planned lane.
func planned(ctx context.Context) context.Context { return context.WithValue(ctx, plannedKey{}, true) }

// plan sets the next steps of the calls made under a planned context.
func (f *faults) plan(steps ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.planned = steps
}

// others sets the next steps of every other call, and what they do after those.
func (f *faults) others(rest fault, steps ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.background, f.rest = steps, rest
}

func (f *faults) next(ctx context.Context) fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Value(plannedKey{}) != nil {
		return pop(&f.planned, pass)
	}
	return pop(&f.background, f.rest)
}

func pop(lane *[]fault, otherwise fault) fault {
	if len(*lane) == 0 {
		return otherwise
	}
	step := (*lane)[0]
	*lane = (*lane)[1:]
	return step
}

// run makes the call, or not, as the next step says.
func run[T any](f *faults, ctx context.Context, call func() (T, error)) (T, error) {
	var zero T
	step := f.next(ctx)
	if step == fail {
		return zero, errInjected
	}
	resp, err := call()
	if step == lose {
		return zero, errInjected
	}
	return resp, err
}

type faultyKV struct {
	clientv3.KV
	f *faults
}

func (k faultyKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return run(k.f, ctx, func() (*clientv3.GetResponse, error) { return k.KV.Get(ctx, key, opts...) })
}

func (k faultyKV) Txn(ctx context.Context) clientv3.Txn {
	return &wrappedTxn{Txn: k.KV.Txn(ctx), commit: func(txn clientv3.Txn) (*clientv3.TxnResponse, error) {
		return run(k.f, ctx, txn.Commit)
	}}
}

// wrappedTxn is a real client's transaction whose Commit goes through commit.
type wrappedTxn struct {
	clientv3.Txn
	commit func(clientv3.Txn) (*clientv3.TxnResponse, error)
}

func (t *wrappedTxn) If(cs ...clientv3.Cmp) clientv3.Txn     { t.Txn = t.Txn.If(cs...); return t }
func (t *wrappedTxn) Then(ops ...clientv3.Op) clientv3.Txn   { t.Txn = t.Txn.Then(ops...); return t }
func (t *wrappedTxn) Else(ops ...clientv3.Op) clientv3.Txn   { t.Txn = t.Txn.Else(ops...); return t }
func (t *wrappedTxn) Commit() (*clientv3.TxnResponse, error) { return t.commit(t.Txn) }

type faultyLease struct {
	clientv3.Lease
	f *faults
}

func (l faultyLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return run(l.f, ctx, func() (*clientv3.LeaseTimeToLiveResponse, error) { return l.Lease.TimeToLive(ctx, id, opts...) })
}

// newFaultyBackend returns a Backend whose client's calls fail as f says, closed when the test
// ends. Its keep-alives (KeepAliveOnce) are never failed.
func newFaultyBackend(t testing.TB, c *etcdtest.Cluster, opts ...etcdbackend.Option) (*etcdbackend.Backend, *faults) {
	cli := c.Client(t)
	f := &faults{}
	cli.KV = faultyKV{KV: cli.KV, f: f}
	cli.Lease = faultyLease{Lease: cli.Lease, f: f}
	b := etcdbackend.New(cli, opts...)
	t.Cleanup(func() { _ = b.Close() })
	return b, f
}
