package fencelock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// Observers add up: a metrics observer and a logger both hear every event. WithLogger after
// WithObserver replaced the observer, so a user had metrics or logs, not both.
func TestObserversAddUp(t *testing.T) {
	var logs bytes.Buffer
	var seen []fencelock.EventKind
	c := fencelock.New(memorybackend.New().Backend(),
		fencelock.WithObserver(func(e fencelock.Event) { seen = append(seen, e.Kind) }),
		fencelock.WithLogger(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		fencelock.WithObserver(nil))
	defer c.Close()
	lock, err := c.Obtain(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != fencelock.EventObtained || seen[1] != fencelock.EventReleased {
		t.Fatalf("the first observer saw %v, want obtained and released", seen)
	}
	if !strings.Contains(logs.String(), "fencelock: obtained") || !strings.Contains(logs.String(), "fencelock: released") {
		t.Fatalf("the logger wrote %q, want the obtain and the release", logs.String())
	}
}
