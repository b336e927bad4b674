package fencelockprom

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// The metrics of real obtains, waits, renewals, a loss and releases against a real Redis, read
// back from a registry scraped over HTTP.
func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	server := testserver.StartRedis(t)
	rdb := server.ClientT(t)
	m := New(WithBackend("redis"), WithName(func(name string) string { kind, _, _ := strings.Cut(name, ":"); return kind }))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(m.Observe))
	t.Cleanup(func() { _ = c.Close() })
	other := fencelock.New(redisbackend.New(rdb))
	t.Cleanup(func() { _ = other.Close() })

	// Obtained, held for a few renewals, released.
	lock, err := c.Obtain(ctx, "order:1", fencelock.WithTTL(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, "a renewal", func() bool {
		return testutil.ToFloat64(m.renewals.WithLabelValues("redis", "order", "ok")) >= 1
	})
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Held elsewhere: one attempt, then a wait that times out.
	held, err := other.Obtain(ctx, "order:2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryObtain(ctx, "order:2"); !errors.Is(err, fencelock.ErrNotObtained) {
		t.Fatal(err)
	}
	short, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = c.Obtain(short, "order:2")
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait that ran out: %v", err)
	}
	_ = held.Release(ctx)
	// A waiter counted while it waits, then handed the lock on its holder's release.
	held, err = other.Obtain(ctx, "order:3")
	if err != nil {
		t.Fatal(err)
	}
	handed := make(chan error, 1)
	go func() {
		l, err := c.Obtain(ctx, "order:3")
		if err == nil {
			err = l.Release(ctx)
		}
		handed <- err
	}()
	testserver.WaitFor(t, 5*time.Second, "fencelock_waiters to be 1 while a waiter waits", func() bool {
		return testutil.ToFloat64(m.waiters.WithLabelValues("redis", "order")) == 1
	})
	_ = held.Release(ctx)
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	// Lost: its key deleted behind its back.
	lost, err := c.Obtain(ctx, "job:nightly", fencelock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key("job:nightly")).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock whose key was deleted was never lost")
	}
	if err := lost.Release(ctx); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("release of a lost lock: %v", err)
	}
	// The loss is told to the observer just after the lock's context ends; one Observe call
	// counts the loss and then counts the lock out of locks_held: wait for both.
	testserver.WaitFor(t, 5*time.Second, "the loss counted and the lock counted out of locks_held", func() bool {
		return testutil.ToFloat64(m.losses.WithLabelValues("redis", "job", "store")) != 0 &&
			testutil.ToFloat64(m.holding.WithLabelValues("redis", "job")) == 0
	})

	for _, tc := range []struct {
		metric prometheus.Collector
		want   float64
	}{
		{m.renewals.WithLabelValues("redis", "order", "ok"), -1}, // at least one
		{m.releases.WithLabelValues("redis", "order", "ok"), 2},
		{m.waiters.WithLabelValues("redis", "order"), 0},
		{m.handover.WithLabelValues("redis", "order"), 1},
		{m.releases.WithLabelValues("redis", "job", "not_held"), 1},
		{m.losses.WithLabelValues("redis", "job", "store"), 1},
		{m.holding.WithLabelValues("redis", "order"), 0},
		{m.holding.WithLabelValues("redis", "job"), 0},
	} {
		got := testutil.ToFloat64(tc.metric)
		if (tc.want < 0 && got < 1) || (tc.want >= 0 && got != tc.want) {
			t.Errorf("%v: %v, want %v", desc(tc.metric), got, tc.want)
		}
	}
	for outcome, want := range map[string]uint64{"obtained": 2, "held": 1, "timeout": 1} {
		if n := histogramCount(t, m.obtain.WithLabelValues("redis", "order", outcome)); n != want {
			t.Errorf("obtain_seconds{outcome=%q}: %d observations, want %d", outcome, n, want)
		}
	}

	// The exposition, scraped as Prometheus would.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{
		`fencelock_obtain_seconds_count{backend="redis",lock="order",outcome="obtained"} 2`,
		`fencelock_losses_total{backend="redis",cause="store",lock="job"} 1`,
		`fencelock_hold_seconds_count{backend="redis",end="lost",lock="job"} 1`,
		`# TYPE fencelock_locks_held gauge`,
		`fencelock_handovers_total{backend="redis",lock="order"} 1`,
		`fencelock_waiters{backend="redis",lock="order"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the scrape lacks %q:\n%s", want, body)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// Without WithName, no metric has a lock label: names are unbounded.
func TestNoNameLabel(t *testing.T) {
	m := New()
	m.Observe(fencelock.Event{Kind: fencelock.EventObtained, Name: "order:10086", Duration: time.Millisecond})
	m.Observe(fencelock.Event{Kind: fencelock.EventLost, Name: "order:10086", Err: fencelock.ErrClosed})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "lock" || strings.Contains(l.GetValue(), "10086") {
					t.Errorf("%s has label %s=%q", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	if got := testutil.ToFloat64(m.losses.WithLabelValues("", "closed")); got != 1 {
		t.Errorf("losses_total{cause=closed}: %v", got)
	}
}

func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	o.(prometheus.Histogram).Collect(ch)
	var out dto.Metric
	if err := (<-ch).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

func desc(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
}

// Every series the Grafana dashboard in docs/ queries is one these metrics export, with the
// labels it groups by: the dashboard cannot drift from the metrics unseen.
func TestDashboardQueriesExportedSeries(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	m := New(WithBackend("b"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for _, k := range []fencelock.EventKind{fencelock.EventWaiting, fencelock.EventObtained, fencelock.EventNotObtained, fencelock.EventWaited, fencelock.EventRenewed,
		fencelock.EventLost, fencelock.EventReleased, fencelock.EventCleanup, fencelock.EventUnavailable} {
		m.Observe(fencelock.Event{Kind: k, Name: "x", Duration: time.Millisecond, Waited: true, Handover: true, Attempts: 1})
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{} // series name -> its labels
	for _, f := range families {
		ls := map[string]bool{"le": true}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				ls[l.GetName()] = true
			}
		}
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			labels[f.GetName()+suffix] = ls
		}
	}
	series := regexp.MustCompile(`fencelock_[a-z_]+`)
	by := regexp.MustCompile(`by \(([a-z_, ]+)\)`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			names := series.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q queries no fencelock series", p.Title, tg.Expr)
			}
			for _, n := range names {
				ls, ok := labels[n]
				if !ok {
					t.Errorf("panel %q queries %s, which is not exported", p.Title, n)
					continue
				}
				for _, g := range by.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(g[1], ",") {
						if l = strings.TrimSpace(l); !ls[l] {
							t.Errorf("panel %q groups %s by %q, which it does not have", p.Title, n, l)
						}
					}
				}
			}
		}
	}
	if queries < 5 {
		t.Fatalf("the dashboard has %d queries", queries)
	}
}

// What the metrics said wrong: a failed Refresh counted nothing; a lost lock stayed in
// fencelock_locks_held until its Release; and a wait in the backend's line (Redis keeps one)
// never observed fencelock_wait_seconds.
func TestMetricsOfLossesFailedRefreshesAndLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	m := New(WithBackend("redis"))
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(m.Observe))
	t.Cleanup(func() { _ = c.Close() })
	holding := m.holding.WithLabelValues("redis")

	// Lost with two holds: both count out at the loss, and their releases count nothing more.
	lock, err := c.Obtain(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Obtain(lock.Context(), "lost")
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(holding); got != 2 {
		t.Fatalf("locks_held with two holds: %v", got)
	}
	if err := rdb.Del(ctx, b.Key("lost")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lock.Verify(ctx); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("Verify of a deleted lock: %v", err)
	}
	if got := testutil.ToFloat64(holding); got != 0 {
		t.Errorf("locks_held once both holds were lost, before their releases: %v, want 0", got)
	}
	_ = lock.Release(ctx)
	_ = again.Release(ctx)
	if got := testutil.ToFloat64(holding); got != 0 {
		t.Errorf("locks_held once the lost holds were released: %v, want 0", got)
	}

	// A Refresh the store refuses is a failed renewal.
	refused, err := c.Obtain(ctx, "refresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, b.Key("refresh")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := refused.Refresh(ctx, 0); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Fatalf("Refresh of a deleted lock: %v", err)
	}
	_ = refused.Release(ctx)
	if got := testutil.ToFloat64(m.renewals.WithLabelValues("redis", "failed")); got != 1 {
		t.Errorf("renewals_total{result=failed} after a refused Refresh: %v, want 1", got)
	}

	// A wait in the line: one wake, the grant.
	holder, err := c.Obtain(ctx, "line")
	if err != nil {
		t.Fatal(err)
	}
	other := fencelock.New(b, fencelock.WithObserver(m.Observe))
	t.Cleanup(func() { _ = other.Close() })
	handed := make(chan error, 1)
	go func() {
		l, err := other.Obtain(ctx, "line")
		if err == nil {
			err = l.Release(ctx)
		}
		handed <- err
	}()
	for testutil.ToFloat64(m.waiters.WithLabelValues("redis")) != 1 {
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
	if n := histogramCount(t, m.waited.WithLabelValues("redis")); n != 1 {
		t.Errorf("wait_seconds after one wait in line: %d observations, want 1", n)
	}
}

// A store out of reach was no series at all: calls waited or timed out as "timeout". Now the
// attempts that failed on it are counted (fencelock_unavailable_attempts_total) and a call
// that ended while they failed is the outcome "unavailable", read from the registry.
func TestUnavailableStoreCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	server := testserver.StartRedis(t)
	rdb := server.ClientT(t)
	m := New(WithBackend("redis"), WithName(func(name string) string { kind, _, _ := strings.Cut(name, ":"); return kind }))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(m.Observe))
	t.Cleanup(func() { _ = c.Close() })
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := c.Obtain(short, "order:1")
	scancel()
	if !errors.Is(err, fencelock.ErrUnavailable) {
		t.Fatalf("Obtain on a killed Redis: %v", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var attempts float64
	var unavailable uint64
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["lock"] != "order" || labels["backend"] != "redis" {
				continue
			}
			switch f.GetName() {
			case "fencelock_unavailable_attempts_total":
				attempts = mt.GetCounter().GetValue()
			case "fencelock_obtain_seconds":
				if labels["outcome"] == "unavailable" {
					unavailable = mt.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if attempts < 1 || unavailable != 1 {
		t.Fatalf("fencelock_unavailable_attempts_total %v, fencelock_obtain_seconds{outcome=\"unavailable\"} count %d; want ≥ 1 and 1", attempts, unavailable)
	}
}

// fencelock_leader{election} is 1 while this process leads, and 0 once the term ended, by a
// resignation or a loss.
func TestLeaderGauge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := testserver.StartRedis(t).ClientT(t)
	m := New(WithBackend("redis"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	ended := make(chan fencelock.Event, 2)
	b := redisbackend.New(rdb)
	t.Cleanup(func() { _ = b.Close() })
	c := fencelock.New(b, fencelock.WithObserver(func(e fencelock.Event) {
		m.Observe(e)
		if e.Kind == fencelock.EventTermEnded {
			ended <- e
		}
	}))
	t.Cleanup(func() { _ = c.Close() })
	gauge := func() float64 { return testutil.ToFloat64(m.leader.WithLabelValues("redis", "scheduler")) }
	e := c.Election("scheduler", fencelock.WithTTL(2*time.Second))

	l, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if g := gauge(); g != 1 {
		t.Fatalf("fencelock_leader while leading = %v, want 1", g)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := <-ended; ev.Err != nil || ev.Token != l.Term() {
		t.Fatalf("EventTermEnded of a resignation: %+v", ev)
	}
	if g := gauge(); g != 0 {
		t.Fatalf("fencelock_leader after the resignation = %v, want 0", g)
	}

	l, err = e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if g := gauge(); g != 1 {
		t.Fatalf("fencelock_leader in the second term = %v, want 1", g)
	}
	if err := rdb.Del(ctx, b.Key("scheduler")).Err(); err != nil {
		t.Fatal(err)
	}
	if ev := <-ended; !errors.Is(ev.Err, fencelock.ErrLost) || ev.Token != l.Term() {
		t.Fatalf("EventTermEnded of a loss: %+v, want an error matching ErrLost", ev)
	}
	if g := gauge(); g != 0 {
		t.Fatalf("fencelock_leader after the loss = %v, want 0", g)
	}
	_ = l.Resign(ctx)
	if n, err := testutil.GatherAndCount(reg, "fencelock_leader"); err != nil || n != 1 {
		t.Fatalf("fencelock_leader series: %d, %v; want 1", n, err)
	}
}
