package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/internal/testserver"
)

// slack is how long after its context's deadline a call may return.
const slack = 300 * time.Millisecond

// A waiter whose context ends while etcd cannot be reached returns by its deadline, leaving
// its key's deletion to the Backend, which makes it once etcd answers again. The waiter used
// to wait up to 2s more for the deletion.
func TestQueuedWaitReturnsByDeadline(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	hb, cli := newBackend(t, etcd)
	const name = "wait-deadline"
	lock, err := newLocker(t, hb).Obtain(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	proxy := testserver.StartProxy(t, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	wb := etcdbackend.New(etcd.ClientOf(t, "http://"+proxy.Addr))
	t.Cleanup(func() { _ = wb.Close() })
	t.Cleanup(proxy.Restore)

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := wb.AcquireQueued(short, fencelock.Request{Name: name, Owner: "waiter", TTL: 2 * time.Second})
		done <- err
	}()
	waitKeys(t, cli, hb, name, 2)
	proxy.Blackhole()
	err = <-done
	deadline, _ := short.Deadline()
	if late := time.Since(deadline); late > slack {
		t.Fatalf("AcquireQueued returned %v after its deadline (%v)", late.Round(time.Millisecond), err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireQueued past its deadline: %v", err)
	}
	proxy.Restore()
	waitKeys(t, cli, hb, name, 1) // the waiter's key is gone: deleted, or its lease ran out
}
