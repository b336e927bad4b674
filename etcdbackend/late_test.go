package etcdbackend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
)

// An acquisition's write that etcd applies only after its caller gave up on it, and after
// every clean-up of the Backend ran, leaves nothing behind: etcd takes a request whose context
// ended as it takes any other, and two requests in flight are applied in either order (the
// abandoned puts of TestAbandonedPutLeavesNothing, made certain here). The clean-ups used to
// find nothing, count that as done, and the write then made a key — or added a hold to one —
// on a lease the Backend keeps alive, held by no one.
func TestLateWriteLeavesNothing(t *testing.T) {
	t.Run("Lock", func(t *testing.T) {
		lateWrite(t, driver.Request{Name: "late-write", Owner: "late", TTL: 2 * time.Second}, nil)
	})
	t.Run("Permit", func(t *testing.T) {
		lateWrite(t, driver.Request{Name: "late-write-permit", Owner: "late", TTL: 2 * time.Second, Limit: 1}, nil)
	})
	t.Run("Reentry", func(t *testing.T) {
		first := driver.Request{Name: "late-write-reentry", Owner: "late", Hold: "h1", TTL: 2 * time.Second}
		second := first
		second.Hold = "h2"
		lateWrite(t, second, &first)
	})
}

// lateWrite holds req's write back until the caller's context ended and the Backend's
// clean-up finished, then lets etcd apply it, and checks that the name is free once the
// clean-up finished again (and first, when given, the hold that made the key, released).
func lateWrite(t *testing.T, req driver.Request, first *driver.Request) {
	ctx := bounded(t, 60*time.Second)
	cli := etcd.Client(t)
	kv := &lateKV{KV: cli.KV, sent: make(chan struct{})}
	if first != nil {
		kv.skip = 1 // the transaction that finds the owner's key: the one after adds the hold
	}
	cli.KV = kv
	b := etcdbackend.New(cli)
	t.Cleanup(func() { _ = b.Close() })
	lease := driver.Lease{Name: req.Name, Owner: req.Owner, TTL: req.TTL, Limit: req.Limit}
	if first != nil {
		if _, err := b.Acquire(ctx, *first); err != nil {
			t.Fatal(err)
		}
	} else if _, err := b.Acquire(ctx, driver.Request{Name: req.Name + "-warm", Owner: "warm", TTL: req.TTL}); err != nil {
		t.Fatal(err) // its lease granted: the acquisition below writes first
	}

	actx, cancel := context.WithCancel(context.WithValue(ctx, lateKey{}, true))
	failed := make(chan error, 1)
	go func() {
		_, err := b.Acquire(actx, req)
		failed <- err
	}()
	<-kv.sent
	cancel()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("an acquisition whose context ended with its write in flight: %v", err)
	}
	settled(t, b)
	if _, err := b.Release(ctx, lease, req.Hold); err != nil && !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatal(err) // the Client's undo
	}
	resp, err := kv.apply()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the late write applied; it succeeded: %v", resp.Succeeded)
	if first != nil {
		if _, err := b.Release(ctx, lease, first.Hold); err != nil {
			t.Fatal(err)
		}
	}
	settled(t, b)
	other, _ := newBackend(t, etcd)
	g, err := other.Acquire(ctx, driver.Request{Name: req.Name, Owner: "other", TTL: req.TTL, Limit: req.Limit})
	if err != nil {
		keys, _ := cli.Get(ctx, b.Key(req.Name, ""), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		pkeys, _ := cli.Get(ctx, b.PermitKey(req.Name, ""), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		t.Fatalf("another owner's attempt once every clean-up finished: %v (keys left: %v %v)", err, keys.Kvs, pkeys.Kvs)
	}
	if _, err := other.Release(ctx, driver.Lease{Name: req.Name, Owner: "other", TTL: req.TTL, Limit: req.Limit, Token: g.Token}, ""); err != nil {
		t.Fatal(err)
	}
}

// settled waits until b has no clean-up left to finish.
func settled(t *testing.T, b *etcdbackend.Backend) {
	t.Helper()
	for b.Pending() > 0 {
		time.Sleep(10 * time.Millisecond) // the settler runs at each keep-alive
	}
}

type lateKey struct{}

// lateKV holds back a transaction made under a context marked with lateKey, the first after
// skip of them: its
// Commit says so on sent, waits for its context to end, and fails with the context's error
// without sending it. apply sends it then, as etcd would apply a request that was in flight.
type lateKV struct {
	clientv3.KV
	sent chan struct{}

	mu   sync.Mutex // guards skip and held
	skip int        // the marked transactions to let through first
	held func() (*clientv3.TxnResponse, error)
}

func (k *lateKV) Txn(ctx context.Context) clientv3.Txn {
	if ctx.Value(lateKey{}) == nil {
		return k.KV.Txn(ctx)
	}
	t := &recordedTxn{}
	t.commit = func() (*clientv3.TxnResponse, error) {
		k.mu.Lock()
		caught := k.skip == 0 && k.held == nil
		k.skip--
		k.mu.Unlock()
		if !caught {
			return k.KV.Txn(ctx).If(t.cmps...).Then(t.then...).Else(t.els...).Commit()
		}
		k.mu.Lock()
		k.held = func() (*clientv3.TxnResponse, error) {
			return k.KV.Txn(context.Background()).If(t.cmps...).Then(t.then...).Else(t.els...).Commit()
		}
		k.mu.Unlock()
		close(k.sent)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return t
}

func (k *lateKV) apply() (*clientv3.TxnResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held()
}

// recordedTxn records a transaction's parts for commit.
type recordedTxn struct {
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
	commit    func() (*clientv3.TxnResponse, error)
}

func (t *recordedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *recordedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.then = append(t.then, ops...)
	return t
}

func (t *recordedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.els = append(t.els, ops...)
	return t
}

func (t *recordedTxn) Commit() (*clientv3.TxnResponse, error) { return t.commit() }
