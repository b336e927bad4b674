package fencelockotel

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Spans and metrics of real obtains, a refresh, a loss and releases against a real Redis, read
// back from the SDK's in-memory span recorder and a manual metric reader.
func TestSpansAndMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	o, err := New(WithTracerProvider(tp), WithMeterProvider(mp), WithBackend("redis"), WithNames())
	if err != nil {
		t.Fatal(err)
	}
	server := testserver.StartRedis(t)
	rdb := server.ClientT(t)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(o.Observe))
	t.Cleanup(func() { _ = c.Close() })

	// The caller's span: Obtain, Refresh and Release are its children.
	rctx, request := tp.Tracer("test").Start(ctx, "request")
	lock, err := c.Obtain(rctx, "order:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Refresh(rctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(rctx); err != nil {
		t.Fatal(err)
	}
	request.End()
	// A loss: the key deleted behind the holder's back.
	lost, err := c.Obtain(ctx, "order:2", fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key("order:2")).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("never lost")
	}
	if err := lost.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatal(err)
	}
	// A waiter, counted while it waits, handed the lock on its holder's release.
	other := fencelock.New(redisbackend.New(rdb))
	t.Cleanup(func() { _ = other.Close() })
	held, err := other.Obtain(ctx, "order:3")
	if err != nil {
		t.Fatal(err)
	}
	handed := make(chan *fencelock.Lock, 1)
	go func() {
		l, err := c.Obtain(ctx, "order:3")
		if err != nil {
			t.Error(err)
		}
		handed <- l
	}()
	testserver.WaitFor(t, 5*time.Second, "fencelock.waiters to be 1 while a waiter waits", func() bool {
		return sumOf(t, reader, "fencelock.waiters") == 1
	})
	_ = held.Release(ctx)
	if l := <-handed; l == nil || l.Release(ctx) != nil {
		t.Fatal("the waiter's lock")
	}

	// The loss is told to the observer just after the lock's context ends.
	var byName map[string][]sdktrace.ReadOnlySpan
	testserver.WaitFor(t, 5*time.Second, "the fencelock.Lost span", func() bool {
		byName = map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range spans.Ended() {
			byName[s.Name()] = append(byName[s.Name()], s)
		}
		return len(byName["fencelock.Lost"]) > 0
	})
	parent := request.SpanContext().SpanID()
	for _, name := range []string{"fencelock.Obtain", "fencelock.Refresh", "fencelock.Release"} {
		ss := byName[name]
		if len(ss) == 0 {
			t.Fatalf("no %s span; spans: %v", name, byName)
		}
		s := ss[0]
		if s.Parent().SpanID() != parent {
			t.Errorf("%s is not a child of the caller's span", name)
		}
		if !has(s.Attributes(), attribute.Int64("fencelock.token", lock.Token())) || !has(s.Attributes(), attribute.String("fencelock.lock", "order:1")) ||
			!has(s.Attributes(), attribute.String("fencelock.backend", "redis")) {
			t.Errorf("%s attributes: %v", name, s.Attributes())
		}
		if !s.EndTime().After(s.StartTime()) && name != "fencelock.Release" {
			t.Errorf("%s has no duration: %v to %v", name, s.StartTime(), s.EndTime())
		}
	}
	lostSpans := byName["fencelock.Lost"]
	if len(lostSpans) != 1 || lostSpans[0].Status().Code != codes.Error || !has(lostSpans[0].Attributes(), attribute.String("fencelock.cause", "store")) {
		t.Errorf("the loss's span: %v", lostSpans)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	if h, ok := got["fencelock.obtain.duration"].(metricdata.Histogram[float64]); !ok || count(h) != 3 {
		t.Errorf("fencelock.obtain.duration: %+v", got["fencelock.obtain.duration"])
	}
	if s, ok := got["fencelock.losses"].(metricdata.Sum[int64]); !ok || total(s) != 1 {
		t.Errorf("fencelock.losses: %+v", got["fencelock.losses"])
	}
	if s, ok := got["fencelock.locks.held"].(metricdata.Sum[int64]); !ok || total(s) != 0 {
		t.Errorf("fencelock.locks.held after every release: %+v", got["fencelock.locks.held"])
	}
	if s, ok := got["fencelock.releases"].(metricdata.Sum[int64]); !ok || total(s) != 3 {
		t.Errorf("fencelock.releases: %+v", got["fencelock.releases"])
	}
	if s, ok := got["fencelock.waiters"].(metricdata.Sum[int64]); !ok || total(s) != 0 {
		t.Errorf("fencelock.waiters after the wait: %+v", got["fencelock.waiters"])
	}
	if s, ok := got["fencelock.handovers"].(metricdata.Sum[int64]); !ok || total(s) != 1 {
		t.Errorf("fencelock.handovers: %+v", got["fencelock.handovers"])
	}
	handovers := 0
	for _, s := range byName["fencelock.Obtain"] {
		if has(s.Attributes(), attribute.Bool("fencelock.handover", true)) {
			handovers++
		}
	}
	if handovers != 1 {
		t.Errorf("%d Obtain spans say fencelock.handover, want 1", handovers)
	}
}

// sumOf collects the Int64 sum named name from reader.
func sumOf(t *testing.T, reader *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				return total(s)
			}
		}
	}
	return 0
}

func has(attrs []attribute.KeyValue, kv attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == kv {
			return true
		}
	}
	return false
}

func count(h metricdata.Histogram[float64]) uint64 {
	var n uint64
	for _, p := range h.DataPoints {
		n += p.Count
	}
	return n
}

func total(s metricdata.Sum[int64]) int64 {
	var n int64
	for _, p := range s.DataPoints {
		n += p.Value
	}
	return n
}

// What the instruments said wrong or not at all: a failed Refresh left no span and counted no
// failed renewal; a lost lock stayed in fencelock.locks.held until its Release; and the
// module had no instruments of the waits' wake-ups or of the clean-ups, which the Prometheus
// module has.
func TestFailedRefreshLossWaitsAndCleanups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	o, err := New(WithTracerProvider(tp), WithMeterProvider(mp), WithBackend("redis"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(o.Observe))

	// A Refresh the store refuses: the lock's key is gone.
	lock, err := c.Obtain(ctx, "refresh")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Obtain(lock.Context(), "refresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key("refresh")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lock.Refresh(ctx, 0); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("Refresh of a deleted lock: %v", err)
	}
	if n := sumOf(t, reader, "fencelock.locks.held"); n != 0 {
		t.Errorf("fencelock.locks.held once the lock's two holds were lost: %d, want 0", n)
	}
	_ = lock.Release(ctx)
	_ = again.Release(ctx)
	// A wait in the line, handed the lock on the holder's release.
	holder, err := c.Obtain(ctx, "line")
	if err != nil {
		t.Fatal(err)
	}
	other := fencelock.New(b, fencelock.WithObserver(o.Observe))
	handed := make(chan error, 1)
	go func() {
		l, err := other.Obtain(ctx, "line")
		if err == nil {
			err = l.Release(ctx)
		}
		handed <- err
	}()
	for sumOf(t, reader, "fencelock.waiters") != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("the waiter never waited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	// A Client closed while it holds releases the lock in the background: a clean-up.
	if _, err := other.Obtain(ctx, "closed"); err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	_ = c.Close()

	var refreshed bool
	for _, s := range spans.Ended() {
		if s.Name() == "fencelock.Refresh" && s.Status().Code == codes.Error {
			refreshed = true
		}
	}
	if !refreshed {
		t.Error("no fencelock.Refresh span with an error status for the refused Refresh")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	failed := int64(0)
	if s, ok := got["fencelock.renewals"].(metricdata.Sum[int64]); ok {
		for _, p := range s.DataPoints {
			if v, _ := p.Attributes.Value("fencelock.result"); v.AsString() == "failed" {
				failed += p.Value
			}
		}
	}
	if failed != 1 {
		t.Errorf("fencelock.renewals{result=failed} after a refused Refresh: %d, want 1 (%+v)", failed, got["fencelock.renewals"])
	}
	if h, ok := got["fencelock.wait.duration"].(metricdata.Histogram[float64]); !ok || count(h) != 1 {
		t.Errorf("fencelock.wait.duration after one wait in line: %+v, want 1 observation", got["fencelock.wait.duration"])
	}
	if s, ok := got["fencelock.cleanups"].(metricdata.Sum[int64]); !ok || total(s) != 1 {
		t.Errorf("fencelock.cleanups after a Client closed with a lock: %+v, want 1", got["fencelock.cleanups"])
	}
	if s, ok := got["fencelock.locks.held"].(metricdata.Sum[int64]); !ok || total(s) != 0 {
		t.Errorf("fencelock.locks.held at the end: %+v, want 0", got["fencelock.locks.held"])
	}
}

// A store out of reach was no instrument at all, and a call that ended while it was out of
// reach was recorded as "timeout". Now its failed attempts are counted
// (fencelock.unavailable.attempts) and the call's outcome is "unavailable", an error span.
func TestUnavailableStoreCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	o, err := New(WithTracerProvider(tp), WithMeterProvider(mp), WithBackend("redis"))
	if err != nil {
		t.Fatal(err)
	}
	server := testserver.StartRedis(t)
	b := redisbackend.New(server.ClientT(t))
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(o.Observe))
	t.Cleanup(func() { _ = c.Close() })
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Obtain(short, "down")
	scancel()
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Obtain on a killed Redis: %v", err)
	}
	if n := sumOf(t, reader, "fencelock.unavailable.attempts"); n < 1 {
		t.Fatalf("fencelock.unavailable.attempts = %d, want ≥ 1", n)
	}
	found := false
	for _, s := range spans.Ended() {
		if s.Name() == "fencelock.Obtain" && has(s.Attributes(), attribute.String("fencelock.outcome", "unavailable")) {
			found = s.Status().Code == codes.Error
		}
	}
	if !found {
		t.Fatal("no fencelock.Obtain span with outcome unavailable and an error status")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var outcomes uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "fencelock.obtain.duration" {
				for _, p := range h.DataPoints {
					if v, ok := p.Attributes.Value("fencelock.outcome"); ok && v.AsString() == "unavailable" {
						outcomes += p.Count
					}
				}
			}
		}
	}
	if outcomes != 1 {
		t.Fatalf("fencelock.obtain.duration with outcome unavailable: %d, want 1", outcomes)
	}
}

// fencelock.leader is 1 for the election while this process leads it, and 0 once the term
// ended, by a resignation or a loss.
func TestLeaderInstrument(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	o, err := New(WithMeterProvider(mp), WithBackend("redis"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := testserver.StartRedis(t).ClientT(t)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	ended := make(chan fencelock.Event, 2)
	c := fencelock.New(b, fencelock.WithObserver(func(e fencelock.Event) {
		o.Observe(e)
		if e.Kind == fencelock.EventTermEnded {
			ended <- e
		}
	}))
	t.Cleanup(func() { _ = c.Close() })
	leading := func() int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				s, ok := m.Data.(metricdata.Sum[int64])
				if !ok || m.Name != "fencelock.leader" {
					continue
				}
				var n int64
				for _, p := range s.DataPoints {
					if v, _ := p.Attributes.Value("fencelock.election"); v.AsString() != "scheduler" {
						t.Fatalf("fencelock.leader of election %q", v.AsString())
					}
					n += p.Value
				}
				return n
			}
		}
		return 0
	}
	e := c.Election("scheduler", fencelock.WithTTL(2*time.Second))
	l, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if n := leading(); n != 1 {
		t.Fatalf("fencelock.leader while leading = %d, want 1", n)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	<-ended
	if n := leading(); n != 0 {
		t.Fatalf("fencelock.leader after the resignation = %d, want 0", n)
	}
	if l, err = e.Campaign(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key("scheduler")).Err(); err != nil {
		t.Fatal(err)
	}
	if ev := <-ended; !errors.Is(ev.Err, fencelock.ErrLost) {
		t.Fatalf("EventTermEnded of a loss: %+v", ev)
	}
	if n := leading(); n != 0 {
		t.Fatalf("fencelock.leader after the loss = %d, want 0", n)
	}
	_ = l.Resign(ctx)
}
