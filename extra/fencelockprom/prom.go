// Package fencelockprom exports what a fencelock Client does as Prometheus metrics, fed by the
// Client's observer:
//
//	metrics := fencelockprom.New(fencelockprom.WithBackend("redis"))
//	prometheus.MustRegister(metrics)
//	locker := fencelock.New(backend, fencelock.WithObserver(metrics.Observe))
//
// Lock names are unbounded, so they are no label unless WithName maps each to one of a bounded
// set (an order ID stripped from "order:10086", say). It is a module of its own, so that
// fencelock itself never depends on client_golang.
//
// The metrics, each with a backend label (and a lock label with WithName):
// fencelock_obtain_seconds{outcome}, fencelock_wait_seconds, fencelock_hold_seconds{end},
// fencelock_locks_held, fencelock_renewals_total{result}, fencelock_losses_total{cause},
// fencelock_releases_total{result}, fencelock_cleanups_total{result}, fencelock_waiters,
// fencelock_handovers_total, fencelock_unavailable_attempts_total (attempts that could not
// reach the store: above zero, calls are waiting on a store out of reach; an obtain that
// ended so has outcome "unavailable"), and fencelock_leader{election}: 1 while this process leads the
// election of that name (Campaign or Lead won a term that has not ended), 0 after. Election
// names are a label as they are: keep them few. Every hold is a lock to these metrics: a
// semaphore's permit, a read-write lock's read or write lock and a leadership each count in
// fencelock_locks_held while held, and in fencelock_waiters while they wait.
package fencelockprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock"
)

// Metrics is a prometheus.Collector of one or more Clients' events. Its Observe is safe for
// concurrent use.
type Metrics struct {
	backend string
	name    func(string) string

	obtain   *prometheus.HistogramVec // outcome
	waited   *prometheus.HistogramVec
	held     *prometheus.HistogramVec // how it ended: released, lost
	holding  *prometheus.GaugeVec
	renewals *prometheus.CounterVec // result
	losses   *prometheus.CounterVec // cause
	releases *prometheus.CounterVec // result
	cleanups *prometheus.CounterVec // result
	waiters  *prometheus.GaugeVec
	handover *prometheus.CounterVec
	unavail  *prometheus.CounterVec
	leader   *prometheus.GaugeVec // election
}

// Option configures Metrics.
type Option func(*Metrics)

// WithBackend sets the backend label of every metric ("redis", "etcd", ...). Default: empty.
func WithBackend(name string) Option { return func(m *Metrics) { m.backend = name } }

// WithName adds a lock label to every metric, the value fn maps each lock name to. fn must
// map the names to a bounded set of values: every distinct value is a time series of its own.
func WithName(fn func(name string) string) Option { return func(m *Metrics) { m.name = fn } }

// New returns Metrics; register them with a prometheus.Registerer.
func New(opts ...Option) *Metrics {
	m := &Metrics{}
	for _, o := range opts {
		o(m)
	}
	labels := func(extra ...string) []string {
		l := []string{"backend"}
		if m.name != nil {
			l = append(l, "lock")
		}
		return append(l, extra...)
	}
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m.obtain = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fencelock", Name: "obtain_seconds",
		Help: "Time from an Obtain or TryObtain call to its return, waiting included, by outcome: obtained, held (elsewhere, at the last attempt), unavailable (the last attempt could not reach the store), timeout (the context ended while the store answered), error.", Buckets: buckets},
		labels("outcome"))
	m.waited = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fencelock", Name: "wait_seconds",
		Help: "How long a waiter slept before it was woken, by a release or its timer, and tried again; for a wait in a backend's line (Redis, etcd, ZooKeeper), its time in line until the grant.", Buckets: buckets}, labels())
	m.held = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "fencelock", Name: "hold_seconds",
		Help: "How long a lock was held, by how it ended: released or lost.", Buckets: append(buckets, 60, 300, 1800)}, labels("end"))
	m.holding = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "fencelock", Name: "locks_held",
		Help: "Locks obtained and not yet released or lost (a reentrant hold counts once per Obtain; a lost lock counts out at its loss, not at its later Release)."}, labels())
	m.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencelock", Name: "renewals_total",
		Help: "Renewals by the watchdog or Refresh, by result: ok, or failed (the watchdog's: outcome unknown, tried again; a Refresh's: outcome unknown or refused)."}, labels("result"))
	m.losses = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencelock", Name: "losses_total",
		Help: "Locks lost, by cause: deadline (no renewal confirmed in time), store (the store no longer had it), closed (the Client was closed), max_hold (held as long as WithMaxHold allows), other."}, labels("cause"))
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencelock", Name: "releases_total",
		Help: "Releases, by result: ok, not_held (expired or taken by another), error (retried in the background)."}, labels("result"))
	m.cleanups = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencelock", Name: "cleanups_total",
		Help: "Acquisitions that may have reached the store but were not handed out, and locks a closing Client held, released in the background, by result: ok, or failed (the lock expires by its TTL)."}, labels("result"))
	m.waiters = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "fencelock", Name: "waiters",
		Help: "Obtain calls waiting now: their first attempt found the lock held (or, in a backend's line, they wait behind another holder)."}, labels())
	m.handover = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencelock", Name: "handovers_total",
		Help: "Locks obtained after a wait for another holder: its release or expiry handed the lock on."}, labels())
	m.unavail = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencelock", Name: "unavailable_attempts_total",
		Help: "Attempts to obtain (Obtain, TryObtain, a semaphore's Acquire, an election's campaign) that failed because the store could not be reached, counted when a call tells them: at its first such failure, then at most every 5 s while they go on. Its rate above zero means calls are waiting on a store out of reach."}, labels())
	m.leader = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "fencelock", Name: "leader",
		Help: "1 while this process leads the election (a term won by Campaign or Lead that has not ended), 0 otherwise."}, []string{"backend", "election"})
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.obtain, m.waited, m.held, m.holding, m.renewals, m.losses, m.releases, m.cleanups, m.waiters, m.handover, m.unavail, m.leader}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Observe records e; give it to fencelock.WithObserver.
func (m *Metrics) Observe(e fencelock.Event) {
	l := []string{m.backend}
	if m.name != nil {
		l = append(l, m.name(e.Name))
	}
	with := func(v ...string) []string { return append(l[:len(l):len(l)], v...) }
	secs := e.Duration.Seconds()
	switch e.Kind {
	case fencelock.EventObtained:
		m.obtain.WithLabelValues(with(e.Outcome())...).Observe(secs)
		m.holding.WithLabelValues(l...).Inc()
		if e.Waited {
			m.waiters.WithLabelValues(l...).Dec()
		}
		if e.Handover {
			m.handover.WithLabelValues(l...).Inc()
		}
	case fencelock.EventNotObtained:
		m.obtain.WithLabelValues(with(e.Outcome())...).Observe(secs)
		if e.Waited {
			m.waiters.WithLabelValues(l...).Dec()
		}
	case fencelock.EventWaiting:
		m.waiters.WithLabelValues(l...).Inc()
	case fencelock.EventWaited:
		m.waited.WithLabelValues(l...).Observe(secs)
	case fencelock.EventRenewed:
		m.renewals.WithLabelValues(with("ok")...).Inc()
	case fencelock.EventRenewFailed:
		m.renewals.WithLabelValues(with("failed")...).Inc()
	case fencelock.EventLost:
		m.losses.WithLabelValues(with(e.Cause())...).Inc()
		m.held.WithLabelValues(with("lost")...).Observe(secs)
		m.holding.WithLabelValues(l...).Sub(float64(e.Holds))
	case fencelock.EventReleased:
		if e.Err == nil {
			m.held.WithLabelValues(with("released")...).Observe(secs)
		}
		m.releases.WithLabelValues(with(e.Result())...).Inc()
		if !e.Lost { // a lost lock was counted out at its loss
			m.holding.WithLabelValues(l...).Dec()
		}
	case fencelock.EventElected:
		m.leader.WithLabelValues(m.backend, e.Name).Inc()
	case fencelock.EventTermEnded:
		m.leader.WithLabelValues(m.backend, e.Name).Dec()
	case fencelock.EventCleanup:
		result := "ok"
		if e.Err != nil {
			result = "failed"
		}
		m.cleanups.WithLabelValues(with(result)...).Inc()
	case fencelock.EventUnavailable:
		m.unavail.WithLabelValues(l...).Add(float64(e.Attempts))
	}
}
