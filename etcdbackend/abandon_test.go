package etcdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/etcdbackend"
)

// Acquisitions whose context ends while their write is in flight leave nothing behind, once
// the Client's and the Backend's clean-up are done: no key of theirs is left, and every lock,
// and every semaphore of 1, is free. Both clean-ups used to run before etcd applied the write, find nothing, and count that
// as done; the key then stayed on the Backend's lease, which it keeps alive, held by no one
// until the process exited. Whether etcd applies a write after the clean-up that followed it
// depends on how its goroutines are scheduled: TestLateWriteLeavesNothing makes that certain.
func TestAbandonedPutLeavesNothing(t *testing.T) {
	ctx := bounded(t, 120*time.Second)
	_, cli := newBackend(t, etcd)
	run, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i := range 2 { // the write load that keeps etcd's applies a few ms behind
		wg.Go(func() {
			for n := 0; run.Err() == nil; n++ {
				_, _ = cli.Put(run, fmt.Sprintf("abandoned-put-load/%d/%d", i, n%64), "x")
			}
		})
	}
	var backends []*etcdbackend.Backend
	var calls, failed [4]atomic.Int64
	for i := range 16 {
		b, _ := newBackend(t, etcd)
		backends = append(backends, b)
		warm := driver.Request{Name: fmt.Sprintf("abandoned-warm-%d", i), Owner: "warm", TTL: 2 * time.Second}
		for { // its lease granted: the calls below write at once
			_, err := b.Acquire(ctx, warm)
			if err == nil {
				break
			}
			// Under the write load a new session's lease can lapse before its first keep-alive
			// answers: the grant then finds it gone (ErrNotHeld), and the warm-up tries again.
			if !errors.Is(err, fencelock.ErrUnavailable) && !errors.Is(err, fencelock.ErrNotHeld) {
				t.Fatal(err)
			}
		}
		c := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(2*time.Second)))
		wg.Go(func() {
			defer c.Close()
			for n := 0; run.Err() == nil; n++ {
				// A name for each call: the write is the call's first request, never a wait.
				name := fmt.Sprintf("abandoned-put-%d-%d", i, n)
				actx, cancel := context.WithTimeout(run, time.Duration(1+rand.IntN(40))*time.Millisecond)
				var err error
				switch i % 4 {
				case 0:
					var l *fencelock.Lock
					if l, err = c.Obtain(actx, name); err == nil {
						err = l.Release(ctx)
					}
				case 1:
					var l *fencelock.Lock
					if l, err = c.Semaphore(name, 1).Acquire(actx); err == nil {
						err = l.Release(ctx)
					}
				case 2:
					req := driver.Request{Name: name, Owner: "queued", TTL: 2 * time.Second}
					if _, err = b.AcquireQueued(actx, req); err == nil {
						_, err = b.Release(ctx, driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL}, "")
					}
				case 3:
					req := driver.Request{Name: name, Owner: "permit", TTL: 2 * time.Second, Limit: 1}
					if _, err = b.AcquireQueued(actx, req); err == nil {
						_, err = b.Release(ctx, driver.Lease{Name: name, Owner: req.Owner, TTL: req.TTL, Limit: 1}, "")
					}
				}
				cancel()
				calls[i%4].Add(1)
				if err != nil {
					failed[i%4].Add(1)
				}
			}
		})
	}
	wg.Wait() // the Clients closed: their undos are done
	for _, b := range backends {
		settled(t, b)
	}
	for i, what := range []string{"Obtain", "Semaphore.Acquire", "AcquireQueued", "AcquireQueued of a permit"} {
		t.Logf("%s: %d calls, %d failed", what, calls[i].Load(), failed[i].Load())
	}
	ob, _ := newBackend(t, etcd)
	c := newLocker(t, ob)
	for _, root := range []string{ob.Key("abandoned-put-", ""), ob.PermitKey("abandoned-put-", "")} {
		root = strings.TrimSuffix(root, "/")
		left, err := cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range left.Kvs {
			// A key left: its name is held by no one.
			escaped, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/")
			name := "abandoned-put-" + escaped
			var err error
			var l *fencelock.Lock
			if root == strings.TrimSuffix(ob.Key("abandoned-put-", ""), "/") {
				l, err = c.TryObtain(ctx, name)
			} else {
				l, err = c.Semaphore(name, 1).TryAcquire(ctx)
			}
			if err == nil {
				_ = l.Release(ctx)
			}
			t.Errorf("%s is left once every clean-up is done (created at revision %d); an attempt on %q: %v", kv.Key, kv.CreateRevision, name, err)
		}
	}
}
