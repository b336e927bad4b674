package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// list shows a backend's locks whether or not it can name its semaphores: one that keeps
// semaphores but cannot name them says so, one that keeps none says nothing of them. A
// read-write lock reads as one.
func TestListSemaphoresOrNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := redisbackend.New(testserver.StartRedis(t).ClientT(t))
	c := fencelock.New(b, fencelock.WithDefaults(fencelock.WithTTL(10*time.Second)))
	defer c.Close()
	lock, err := c.Obtain(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	permit, err := c.Semaphore("x", 2).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Release(ctx)
	writer, err := c.RWLock("rw").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Release(ctx)

	for _, tc := range []struct {
		name      string
		b         fencelock.Backend
		want, not []string
		elements  int
	}{
		{"named", b, []string{`semaphore "x": 1 of 2 permits held, 0 waiting`, `semaphore "rw" (a read-write lock): write-locked, 0 waiting`, permit.Owner(), writer.Owner()},
			[]string{"cannot list"}, 3},
		{"unnamed", struct {
			fencelock.Backend
			driver.Namer
			driver.Semaphores
		}{b, b, b}, []string{"the test backend cannot list its semaphores: fencelock status --semaphore NAME shows one"},
			[]string{`semaphore "`, "no semaphores held", permit.Owner()}, 1},
		{"none kept", struct {
			fencelock.Backend
			driver.Namer
		}{b, b}, nil, []string{"semaphore"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := list(ctx, fencelock.New(tc.b), tc.b, "")
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			l.writeText(&text, "test")
			out := text.String()
			if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, lock.Owner()) {
				t.Errorf("list shows no lock table first: %q", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("list: %q, want %q in it", out, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("list: %q, want no %q in it", out, n)
				}
			}
			var js strings.Builder
			var elements []map[string]any
			if err := l.writeJSON(&js); err != nil || json.Unmarshal([]byte(js.String()), &elements) != nil || len(elements) != tc.elements || elements[0]["kind"] != "lock" {
				t.Errorf("list --json: %s (%v), want %d elements, the lock first", js.String(), err, tc.elements)
			}
		})
	}
	if err := writer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := c.RWLock("rw").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	l, err := list(ctx, fencelock.New(b), b, "rw")
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	l.writeText(&text, "test")
	if !strings.Contains(text.String(), `semaphore "rw" (a read-write lock): read-locked by 1 reader, 0 waiting`) {
		t.Fatalf("list of a read-locked RWLock: %q", text.String())
	}
}
