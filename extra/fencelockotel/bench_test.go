package fencelockotel

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencelock/fencelock"
)

// What the OpenTelemetry observer costs per cycle (Obtain and Release): the events of one cycle
// fed to it, with the SDK's tracer (every span sampled, none exported) and meter (a manual
// reader). Compare with BenchmarkCycle in extra/fencelockprom, a cycle on a real Redis.
//
//	go test -run '^$' -bench . -benchmem ./extra/fencelockotel/
func BenchmarkObserve(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"spans and metrics", nil},
		{"with the lock's name", []Option{WithNames()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o, err := New(append([]Option{WithTracerProvider(tp), WithMeterProvider(mp), WithBackend("redis")}, tc.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			obtained := fencelock.Event{Kind: fencelock.EventObtained, Name: "order:1", Token: 7, Duration: time.Millisecond, Owner: "o", Context: ctx}
			released := fencelock.Event{Kind: fencelock.EventReleased, Name: "order:1", Token: 7, Duration: time.Second, Owner: "o", Took: time.Millisecond, Context: ctx}
			b.ReportAllocs()
			for b.Loop() {
				o.Observe(obtained)
				o.Observe(released)
			}
		})
	}
}
