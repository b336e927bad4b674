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

// A release whose outcome the client never learned is retried by the Backend: the key sits on
// a lease the Backend keeps alive, and would otherwise hold the lock for no one until the
// Backend closed (found by the safety suite under a leader restart).
func TestUnconfirmedReleaseIsRetried(t *testing.T) {
	ctx := bounded(t, 60*time.Second)
	proxy := testserver.StartProxy(t, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	b := etcdbackend.New(etcd.ClientOf(t, "http://"+proxy.Addr))
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b)
	t.Cleanup(func() { _ = c.Close() })
	observer, _ := newBackend(t, etcd)

	const name = "owed-release"
	lock, err := c.Obtain(ctx, name, fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = lock.Release(short)
	cancel()
	if err == nil || errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("a release over a cut link: %v", err)
	}
	if info, err := observer.Inspect(ctx, name); err != nil || !info.Held {
		t.Fatalf("the failed release reached etcd after all: %+v %v", info, err)
	}
	proxy.Restore()
	// The Backend's lease lives on (its keep-alive runs); the lock must not.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := observer.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held 10s after its release failed: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
