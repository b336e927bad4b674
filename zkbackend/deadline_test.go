package zkbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// slack is how long after its context's deadline a call may return.
const slack = 300 * time.Millisecond

// Every call returns by its context's deadline while the server does not answer (paused: the
// connection stays open and silent). go-zookeeper's requests take no context; the calls used
// to wait for its own timeout (two thirds of the session timeout) once per request.
func TestCallsReturnByDeadline(t *testing.T) {
	srv := zktest.Start(t, zktest.Options{})
	b := newBackend(dial(t, srv.Addr, nil))
	ctx := ctxTimeout(t, 60*time.Second)
	name := lockName(t)
	req := driver.Request{Name: name, Owner: "owner", Hold: "h", TTL: sessionTimeout}
	lease := driver.Lease{Name: name, Owner: "owner", TTL: sessionTimeout}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })

	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error {
			_, err := b.Acquire(ctx, driver.Request{Name: name, Owner: "other", TTL: sessionTimeout})
			return err
		}},
		{"AcquireQueued", func(ctx context.Context) error {
			_, err := b.AcquireQueued(ctx, driver.Request{Name: name, Owner: "waiter", TTL: sessionTimeout})
			return err
		}},
		{"Renew", func(ctx context.Context) error { return b.Renew(ctx, []driver.Lease{lease})[0].Err }},
		{"Inspect", func(ctx context.Context) error { _, err := b.Inspect(ctx, name); return err }},
		{"List", func(ctx context.Context) error { _, err := fencelock.List(ctx, b, name); return err }},
		{"Release", func(ctx context.Context) error { _, err := b.Release(ctx, lease, "h"); return err }},
	} {
		short, cancel := context.WithTimeout(ctx, bound)
		err := tc.call(short)
		deadline, _ := short.Deadline()
		late := time.Since(deadline)
		cancel()
		if err == nil {
			t.Errorf("%s against a paused server succeeded", tc.what)
		}
		if late > slack {
			t.Errorf("%s returned %v after its deadline (%v)", tc.what, late.Round(time.Millisecond), err)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, fencelock.ErrUnavailable) {
			t.Errorf("%s: %v, want the deadline or ErrUnavailable", tc.what, err)
		}
	}
}
