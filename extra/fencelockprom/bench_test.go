package fencelockprom

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// What the Prometheus observer costs per cycle (Obtain and Release of a free lock) on a real
// Redis on loopback, beside the same cycle with no observer, in one run: compare the two.
// Observe alone is the observer's own cost, the events of one cycle fed to it.
//
//	go test -run '^$' -bench . -benchmem ./extra/fencelockprom/
func BenchmarkCycle(b *testing.B) {
	rdb := testserver.StartRedis(b).ClientT(b)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []fencelock.ClientOption
	}{
		{"no observer", nil},
		{"prometheus", []fencelock.ClientOption{fencelock.WithObserver(registered(b, New(WithBackend("redis"))).Observe)}},
		{"prometheus, lock label", []fencelock.ClientOption{fencelock.WithObserver(registered(b, New(WithBackend("redis"), WithName(func(string) string { return "order" }))).Observe)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			backend := redisbackend.New(rdb)
			c := fencelock.New(backend, tc.opts...)
			defer func() { _ = c.Close(); _ = backend.Close() }()
			for b.Loop() {
				l, err := c.TryObtain(ctx, "bench-cycle", fencelock.WithWatchdog(false))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkObserve(b *testing.B) {
	m := registered(b, New(WithBackend("redis"), WithName(func(string) string { return "order" })))
	obtained := fencelock.Event{Kind: fencelock.EventObtained, Name: "order:1", Token: 7, Duration: time.Millisecond, Owner: "o"}
	released := fencelock.Event{Kind: fencelock.EventReleased, Name: "order:1", Token: 7, Duration: time.Second, Owner: "o", Took: time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(obtained)
		m.Observe(released)
	}
}

func registered(b *testing.B, m *Metrics) *Metrics {
	prometheus.NewRegistry().MustRegister(m)
	return m
}
