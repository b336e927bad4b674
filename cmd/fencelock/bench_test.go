package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

const benchWait = 2 * time.Minute

func TestBenchJSON(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	r := cli(t, benchWait, nil, "bench", "--backend", "redis://"+srv.Addr, "--ops", "200", "--workers", "4", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not a terminal, yet bench wrote to it: %q", r.stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	u, c, h := rep.Uncontended, rep.Contended, rep.Handoff
	if u.Ops != 200 || u.OpsPerSec <= 0 || u.Seconds <= 0 {
		t.Errorf("uncontended %+v", u)
	}
	checkLatency(t, "uncontended", u.Latency, 200, 0)
	if c.Workers != 4 || c.Acquisitions != 200 || c.AcquisitionsPerSec <= 0 || len(c.PerWorker) != 4 {
		t.Errorf("contended %+v", c)
	}
	var sum int64
	for _, n := range c.PerWorker {
		sum += n
	}
	if sum != c.Acquisitions {
		t.Errorf("per-worker counts %v add up to %d, not %d", c.PerWorker, sum, c.Acquisitions)
	}
	if c.Fairness < 0.25 || c.Fairness > 1 || c.OwnerChanges < 0 || c.OwnerChanges >= c.Acquisitions {
		t.Errorf("contended fairness %v, owner changes %d", c.Fairness, c.OwnerChanges)
	}
	if c.Overlaps != 0 {
		t.Errorf("%d overlapping holds", c.Overlaps)
	}
	if h.Handoffs != 200 {
		t.Errorf("handoff %+v", h)
	}
	// A hand-off can be done before the holder's Release returns (the release itself hands the
	// lock over on Redis); those count as 0 µs, and can be most of them.
	checkLatency(t, "handoff", h.Latency, 200, h.AheadOfRelease)
	if h.AheadOfRelease < 0 || h.AheadOfRelease > h.Handoffs || uint64(h.AheadOfRelease) > h.Latency.Histogram[0].Count {
		t.Errorf("%d handoffs ahead of the release, against %+v", h.AheadOfRelease, h.Latency)
	}
	if rep.TTLMS != 10000 || rep.Name != "bench" || rep.Backend != "redis://"+srv.Addr {
		t.Errorf("report header %+v", rep)
	}
}

// checkLatency checks a phase's latency summary; zeros is how many samples were 0 µs by
// construction, which may make the median 0.
func checkLatency(t *testing.T, phase string, s latencyStats, count uint64, zeros int64) {
	t.Helper()
	if s.Count != count || s.P50US < 0 || (s.P50US == 0 && uint64(zeros) < count/2) ||
		s.P50US > s.P90US || s.P90US > s.P99US || s.P99US > s.MaxUS || len(s.Histogram) == 0 {
		t.Errorf("%s latency %+v", phase, s)
	}
	var n uint64
	for _, b := range s.Histogram {
		n += b.Count
	}
	if n != count {
		t.Errorf("%s histogram holds %d samples, want %d", phase, n, count)
	}
}

func TestBenchHumanOutput(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	r := cli(t, benchWait, nil, "bench", "--backend", "redis://"+srv.Addr, "--ops", "50", "--workers", "2", "--duration", "20s")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"Uncontended", "Contended", "Handoff", "p50", "p99", "ops/s", "fairness"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no %q in\n%s", want, r.stdout)
		}
	}
}

func TestBenchLockHeldElsewhere(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	c := fencelock.New(redisbackend.New(srv.ClientT(t)))
	t.Cleanup(func() { _ = c.Close() })
	lock, err := c.Obtain(context.Background(), "taken", fencelock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	r := cli(t, benchWait, nil, "bench", "--backend", "redis://"+srv.Addr, "--name", "taken", "--ops", "10")
	if r.code != exitConflict || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--name") {
		t.Errorf("exit %d stderr %q; want %d and one line that says what to do", r.code, r.stderr, exitConflict)
	}
}

func TestBenchBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--workers", "0"},
		{"--workers", "100000"},
		{"--ttl", "1ms"},
		{"--ttl", "10500us"},
		{"--duration", "0s"},
		{"--ops", "-1"},
		{"--name", ""},
		{"extra"},
	} {
		// The backend is never reached: flags are checked first.
		r := cli(t, benchWait, nil, append([]string{"bench", "--backend", "redis://127.0.0.1:1"}, args...)...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want %d and one line", args, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
}

func TestBenchUnreachableBackend(t *testing.T) {
	t.Parallel()
	r := cli(t, benchWait, nil, "bench", "--backend", "redis://:hunter2@127.0.0.1:1", "--ops", "10")
	if r.code != exitFailure || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "hunter2") {
		t.Errorf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	r := cli(t, benchWait, nil, "bench", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "--workers") {
		t.Errorf("exit %d\n%s", r.code, r.stdout)
	}
}

func TestBenchHistogram(t *testing.T) {
	h := &latencyHist{}
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.9, 900 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.quantile(c.q)
		if d := got - c.want; d < -c.want/30 || d > c.want/30 {
			t.Errorf("q%v = %v, want %v ± 3%%", c.q, got, c.want)
		}
	}
	for v := uint64(0); v < 1<<20; v += 7 {
		lo, hi := histBounds(histIndex(v))
		if v < lo || v >= hi {
			t.Fatalf("%d falls in bucket %d = [%d, %d)", v, histIndex(v), lo, hi)
		}
	}
	if i := histIndex(^uint64(0)); i != histBuckets-1 {
		t.Errorf("the largest value goes to bucket %d of %d", i, histBuckets)
	}
	var merged latencyHist
	merged.merge(h)
	merged.merge(&latencyHist{})
	if merged.n != h.n || merged.min != h.min || merged.max != h.max || merged.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merge lost samples: %d %v %v", merged.n, merged.min, merged.max)
	}
}

func TestBenchJain(t *testing.T) {
	for _, c := range []struct {
		xs   []int64
		want float64
	}{{[]int64{5, 5, 5, 5}, 1}, {[]int64{20, 0, 0, 0}, 0.25}, {[]int64{0, 0}, 0}} {
		if got := jain(c.xs); got != c.want {
			t.Errorf("jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
