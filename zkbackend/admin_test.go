package zkbackend_test

import (
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

func TestListAndForceRelease(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c, b := newClient(t)
	prefix := lockName(t)
	var held []*fencelock.Lock
	for _, n := range []string{prefix + "-a", prefix + "-b", "other-" + prefix} {
		l, err := c.Obtain(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	infos, err := fencelock.List(ctx, b, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 {
		t.Fatalf("List(%q) = %+v, want the two locks with that prefix", prefix, infos)
	}
	info, err := b.ForceRelease(ctx, prefix+"-a")
	if err != nil || !info.Held || info.Token != held[0].Token() {
		t.Fatalf("force release: %+v %v", info, err)
	}
	select {
	case <-held[0].Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the holder of a force-released lock was not told")
	}
	if info, err := b.ForceRelease(ctx, prefix+"-a"); err != nil || info.Held {
		t.Fatalf("force release of a free lock: %+v %v", info, err)
	}
	for _, l := range held[1:] {
		_ = l.Release(ctx)
	}
}
