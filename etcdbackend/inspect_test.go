package etcdbackend_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// Inspect returns the errors of its reads of the holder's metadata and lease, instead of
// reporting the lock without them as if it had none.
func TestInspectReturnsReadErrors(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	b, f := newFaultyBackend(t, etcd)
	const name = "inspect-read-errors"
	lock, err := newLocker(t, b).Obtain(ctx, name, fencelock.WithMetadata("host=a"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	for _, read := range []struct {
		what  string
		steps []fault
	}{
		{"metadata", []fault{pass, fail}},
		{"lease", []fault{pass, pass, fail}},
	} {
		f.plan(read.steps...)
		info, err := b.Inspect(planned(ctx), name)
		if !errors.Is(err, fencelock.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Inspect whose read of the %s failed: %+v, %q; want one line matching ErrUnavailable", read.what, info, err)
		}
	}
	f.plan()
	info, err := b.Inspect(planned(ctx), name)
	if err != nil || info.Meta != "host=a" || info.Remaining <= 0 {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
}
