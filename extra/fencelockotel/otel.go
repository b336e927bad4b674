// Package fencelockotel exports what a fencelock Client does to OpenTelemetry: spans for
// Obtain (its wait included), Refresh, Release and a loss, parented to the caller's context,
// and the metrics of package fencelockprom as OpenTelemetry instruments. It is fed by the
// Client's observer:
//
//	o, err := fencelockotel.New(fencelockotel.WithBackend("redis"))
//	...
//	locker := fencelock.New(backend, fencelock.WithObserver(o.Observe))
//
// Spans carry the backend and the fencing token; the lock name only with WithNames, since
// names are unbounded. It is a module of its own, so that fencelock itself never depends on
// OpenTelemetry.
//
// The instruments, each with the fencelock.backend attribute: fencelock.obtain.duration,
// fencelock.wait.duration, fencelock.hold.duration, fencelock.locks.held, fencelock.renewals,
// fencelock.losses, fencelock.releases, fencelock.cleanups, fencelock.waiters,
// fencelock.handovers, fencelock.unavailable.attempts (attempts that could not reach the
// store), and fencelock.leader: 1 while this process leads the election named by
// its fencelock.election attribute (a term won by Campaign or Lead that has not ended), 0
// after. Election names are an attribute as they are: keep them few. Every hold is a lock to
// these instruments: a semaphore's permit, a read-write lock's read or write lock and a
// leadership each count in fencelock.locks.held while held, and in fencelock.waiters while they
// wait.
package fencelockotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock"
)

const scope = "github.com/fencelock/fencelock/extra/fencelockotel"

// Observer turns fencelock events into spans and metrics. Its Observe is safe for concurrent
// use.
type Observer struct {
	tracer  trace.Tracer
	names   bool
	backend attribute.KeyValue

	obtain   metric.Float64Histogram
	waited   metric.Float64Histogram
	hold     metric.Float64Histogram
	holding  metric.Int64UpDownCounter
	renewals metric.Int64Counter
	losses   metric.Int64Counter
	releases metric.Int64Counter
	cleanups metric.Int64Counter
	waiters  metric.Int64UpDownCounter
	handover metric.Int64Counter
	unavail  metric.Int64Counter
	leader   metric.Int64UpDownCounter
}

type options struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	backend string
	names   bool
}

// Option configures an Observer.
type Option func(*options)

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithBackend sets the fencelock.backend attribute of every span and metric.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// WithNames puts the lock name on spans (fencelock.lock). Metrics never carry it.
func WithNames() Option { return func(o *options) { o.names = true } }

// New returns an Observer.
func New(opts ...Option) (*Observer, error) {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.tp == nil {
		o.tp = otel.GetTracerProvider()
	}
	if o.mp == nil {
		o.mp = otel.GetMeterProvider()
	}
	meter := o.mp.Meter(scope)
	obs := &Observer{tracer: o.tp.Tracer(scope), names: o.names, backend: attribute.String("fencelock.backend", o.backend)}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	obs.obtain, err = meter.Float64Histogram("fencelock.obtain.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an Obtain or TryObtain call to its return, waiting included, by outcome."))
	add(err)
	obs.waited, err = meter.Float64Histogram("fencelock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a waiter slept before it was woken, by a release or its timer, and tried again; for a wait in a backend's line, its time in line until the grant."))
	add(err)
	obs.hold, err = meter.Float64Histogram("fencelock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a lock was held, by how it ended: released or lost."))
	add(err)
	obs.holding, err = meter.Int64UpDownCounter("fencelock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks obtained and not yet released or lost (a reentrant hold counts once per Obtain; a lost lock counts out at its loss)."))
	add(err)
	obs.renewals, err = meter.Int64Counter("fencelock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals by the watchdog or Refresh, by result."))
	add(err)
	obs.losses, err = meter.Int64Counter("fencelock.losses", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks lost, by cause."))
	add(err)
	obs.releases, err = meter.Int64Counter("fencelock.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Releases, by result."))
	add(err)
	obs.cleanups, err = meter.Int64Counter("fencelock.cleanups", metric.WithUnit("{cleanup}"),
		metric.WithDescription("Acquisitions that may have reached the store but were not handed out, and locks a closing Client held, released in the background, by result: ok, or failed (the lock expires by its TTL)."))
	add(err)
	obs.waiters, err = meter.Int64UpDownCounter("fencelock.waiters", metric.WithUnit("{call}"),
		metric.WithDescription("Obtain calls waiting now: their first attempt found the lock held, or they wait in a backend's line behind another holder."))
	add(err)
	obs.handover, err = meter.Int64Counter("fencelock.handovers", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks obtained after a wait for another holder, whose release or expiry handed the lock on."))
	add(err)
	obs.unavail, err = meter.Int64Counter("fencelock.unavailable.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts to obtain that failed because the store could not be reached, counted when a call tells them: at its first such failure, then at most every 5 s while they go on."))
	add(err)
	obs.leader, err = meter.Int64UpDownCounter("fencelock.leader", metric.WithUnit("{term}"),
		metric.WithDescription("1 while this process leads the election (a term won by Campaign or Lead that has not ended), 0 otherwise."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return obs, nil
}

// Observe records e; give it to fencelock.WithObserver.
func (o *Observer) Observe(e fencelock.Event) {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	now := time.Now()
	at := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributes(append([]attribute.KeyValue{o.backend}, kv...)...)
	}
	switch e.Kind {
	case fencelock.EventObtained, fencelock.EventNotObtained:
		out := e.Outcome()
		o.obtain.Record(ctx, e.Duration.Seconds(), at(attribute.String("fencelock.outcome", out)))
		if e.Kind == fencelock.EventObtained {
			o.holding.Add(ctx, 1, at())
		}
		if e.Waited {
			o.waiters.Add(ctx, -1, at())
		}
		if e.Handover {
			o.handover.Add(ctx, 1, at())
		}
		o.span(ctx, e, "fencelock.Obtain", now.Add(-e.Duration), now, out == "error" || out == "unavailable", attribute.String("fencelock.outcome", out),
			attribute.Bool("fencelock.waited", e.Waited), attribute.Bool("fencelock.handover", e.Handover))
	case fencelock.EventWaiting:
		o.waiters.Add(ctx, 1, at())
	case fencelock.EventUnavailable:
		o.unavail.Add(ctx, int64(e.Attempts), at())
	case fencelock.EventElected:
		o.leader.Add(ctx, 1, at(attribute.String("fencelock.election", e.Name)))
	case fencelock.EventTermEnded:
		o.leader.Add(ctx, -1, at(attribute.String("fencelock.election", e.Name)))
	case fencelock.EventWaited:
		o.waited.Record(ctx, e.Duration.Seconds(), at())
	case fencelock.EventCleanup:
		result := "ok"
		if e.Err != nil {
			result = "failed"
		}
		o.cleanups.Add(ctx, 1, at(attribute.String("fencelock.result", result)))
	case fencelock.EventRenewed, fencelock.EventRenewFailed:
		result := "ok"
		if e.Kind == fencelock.EventRenewFailed {
			result = "failed"
		}
		o.renewals.Add(ctx, 1, at(attribute.String("fencelock.result", result)))
		if e.Context != nil { // a Refresh; the watchdog's renewals make no spans
			o.span(ctx, e, "fencelock.Refresh", now.Add(-e.Duration), now, e.Err != nil)
		}
	case fencelock.EventLost:
		c := e.Cause()
		o.losses.Add(ctx, 1, at(attribute.String("fencelock.cause", c)))
		o.hold.Record(ctx, e.Duration.Seconds(), at(attribute.String("fencelock.end", "lost")))
		o.holding.Add(ctx, -int64(e.Holds), at())
		o.span(ctx, e, "fencelock.Lost", now, now, true, attribute.String("fencelock.cause", c))
	case fencelock.EventReleased:
		result := e.Result()
		if e.Err == nil {
			o.hold.Record(ctx, e.Duration.Seconds(), at(attribute.String("fencelock.end", "released")))
		}
		o.releases.Add(ctx, 1, at(attribute.String("fencelock.result", result)))
		if !e.Lost { // a lost lock was counted out at its loss
			o.holding.Add(ctx, -1, at())
		}
		o.span(ctx, e, "fencelock.Release", now.Add(-e.Took), now, result == "error", attribute.String("fencelock.result", result),
			attribute.Float64("fencelock.held_seconds", e.Duration.Seconds()))
	}
}

// span records a finished span of e from start to end, parented to ctx's.
func (o *Observer) span(ctx context.Context, e fencelock.Event, name string, start, end time.Time, failed bool, kv ...attribute.KeyValue) {
	attrs := append([]attribute.KeyValue{o.backend}, kv...)
	if e.Token != 0 {
		attrs = append(attrs, attribute.Int64("fencelock.token", e.Token))
	}
	if o.names {
		attrs = append(attrs, attribute.String("fencelock.lock", e.Name))
	}
	_, s := o.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if e.Err != nil {
		s.RecordError(e.Err, trace.WithTimestamp(end))
	}
	if failed {
		msg := name
		if e.Err != nil {
			msg = e.Err.Error()
		}
		s.SetStatus(codes.Error, msg)
	}
	s.End(trace.WithTimestamp(end))
}
