package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/internal/testserver"
)

// TestTinyRun runs every scenario with tiny counts against real redis-server processes and
// checks that the report covers every contender and that no lock ever had two holders. It
// asserts nothing about timing.
func TestTinyRun(t *testing.T) {
	docs := filepath.Join(t.TempDir(), "PERFORMANCE.md")
	cfg := &config{mode: "tiny", timeout: 3 * time.Minute, writeDocs: true, docs: docs, command: "go test"}
	if err := cfg.finish(strings.Join(scenarioNames, ","), ""); err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	if err := run(context.Background(), cfg, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	report := out.String()
	written, err := os.ReadFile(docs)
	if err != nil {
		t.Fatal(err)
	}
	if string(written) != report {
		t.Error("the docs file differs from the printed report")
	}
	if strings.Contains(report, "## Scenarios that failed") {
		t.Errorf("a scenario failed:\n%s", report[strings.Index(report, "## Scenarios that failed"):])
	}
	for _, h := range []string{"## Against the targets", "## 1. Uncontended latency", "## 2. Throughput",
		"## 3. Contention", "## 4. Handoff", "## 5. Redlock", "## 6. Watchdog at scale", "## 7. Loss by push",
		"## 10. Sizing"} {
		if !strings.Contains(report, h) {
			t.Errorf("the report has no section %q", h)
		}
	}
	for _, e := range entries() {
		if !strings.Contains(report, "| "+e.Label()+" |") && !strings.Contains(report, "| "+e.Library+" |") {
			t.Errorf("the report has no row for %s", e.Label())
		}
	}
	// Contention table: the last column counts overlaps, two workers inside the critical
	// section at once. Any would mean a lock was broken or the harness miscounts.
	from, to := strings.Index(report, "## 3. Contention"), strings.Index(report, "## 4. Handoff")
	if from < 0 || to < from {
		t.Fatalf("no contention section before the handoff section:\n%s", report)
	}
	section := report[from:to]
	rows := regexp.MustCompile(`(?m)^\| (.+) \| (\d+) \|$`).FindAllStringSubmatch(section, -1)
	if len(rows) == 0 {
		t.Fatalf("no contention rows found:\n%s", section)
	}
	for _, r := range rows {
		if r[2] != "0" {
			t.Errorf("%s: %s overlaps", strings.SplitN(r[1], " |", 2)[0], r[2])
		}
	}
	// Loss table: every holder was told. That fencelock is told by push, not at its renewal,
	// redisbackend's TestLossByPush holds; how soon is the benchmark's figure.
	for _, row := range regexp.MustCompile(`(?m)^\| (fencelock.*|rueidislock.*) \| (\S+) \| [\d.]+ ms \| [\d.]+ ms \| (\d+) \|$`).FindAllStringSubmatch(report, -1) {
		if row[2] != "2" || row[3] != "0" {
			t.Errorf("loss row of %s: %s samples, %s not told: want 2 told", row[1], row[2], row[3])
		}
	}
	if !strings.Contains(report, "| fencelock | 2 |") {
		t.Error("no loss row for fencelock with 2 samples")
	}
	// Sizing: every deployment ran every step without a failure, and each backend's chart
	// was written beside the docs.
	at := strings.Index(report, "## 10. Sizing")
	if at < 0 {
		t.Fatalf("no sizing section:\n%s", report)
	}
	sizing := report[at:]
	steps := regexp.MustCompile(`(?m)^\| (Redis|etcd|ZooKeeper) \| ([^|]+) \| (\d+) \| ([\d.]+) \|.* \| (\S+) \|$`).FindAllStringSubmatch(sizing, -1)
	if len(steps) != 7*2 {
		t.Errorf("%d sizing rows, want 14 (7 deployments, 2 steps each):\n%s", len(steps), sizing)
	}
	for _, s := range steps {
		if s[4] == "0" || s[5] != "0" {
			t.Errorf("sizing %s, %s, %s callers: %s cycles/s, failures %s", s[1], s[2], s[3], s[4], s[5])
		}
	}
	holds := regexp.MustCompile(`(?m)^\| (Redis|etcd|ZooKeeper) \| ([^|]+) \| (\d+) in [^|]+ \| [\d.]+ ms/s \| [^|]+ \| (?:\d+ B|–) \| (\d+) \|$`).FindAllStringSubmatch(sizing, -1)
	if len(holds) != 7 {
		t.Errorf("%d rows of held locks, want 7:\n%s", len(holds), sizing)
	}
	for _, h := range holds {
		if h[4] != "0" {
			t.Errorf("sizing %s, %s: %s of %s held locks lost", h[1], h[2], h[4], h[3])
		}
	}
	for _, b := range []string{"redis", "etcd", "zookeeper"} {
		svg, err := os.ReadFile(filepath.Join(filepath.Dir(docs), "sizing-"+b+".svg"))
		if err != nil || !bytes.HasPrefix(svg, []byte("<svg ")) || !bytes.Contains(svg, []byte("<polyline")) {
			t.Errorf("the %s chart: %v, %.80q", b, err, svg)
		}
	}
	if t.Failed() {
		t.Log(report)
	}
}

func TestFlags(t *testing.T) {
	bad := [][]string{
		{"-scenarios", "nope"},
		{"-cycles", "-1"},
		{"-cycles", "99999999"},
		{"-contention-time", "1h"},
		{"-watchdog-ttl", "1500us"},
		{"-contenders", "("},
		{"extra"},
	}
	for _, args := range bad {
		fs := newFlagSet()
		if _, err := parseFlags(fs, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	fs := newFlagSet()
	cfg, err := parseFlags(fs, []string{"-quick", "-scenarios", "latency,handoff", "-cycles", "300", "-write-docs"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.mode != "quick" || cfg.cycles != 300 || cfg.handoffs != modes["quick"].handoffs || !cfg.runs("handoff") || cfg.runs("watchdog") {
		t.Errorf("unexpected config %+v", cfg)
	}
	if want := "go run ./bench -cycles=300 -quick -scenarios=latency,handoff -write-docs"; cfg.command != want {
		t.Errorf("command %q, want %q", cfg.command, want)
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		counts []int
		want   float64
	}{
		{[]int{5, 5, 5, 5}, 1},
		{[]int{8, 0, 0, 0}, 0.25},
		{[]int{0, 0}, 0},
	} {
		if got := jain(c.counts); got != c.want {
			t.Errorf("jain(%v) = %v, want %v", c.counts, got, c.want)
		}
	}
}

// TestFencingFloor checks that the fencing floor is the lock it stands for: a held name is
// refused, a released one is free again, and each token is greater than the last, also when
// the counter is ahead of the server clock.
func TestFencingFloor(t *testing.T) {
	r, err := testserver.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	ctx := context.Background()
	c := &fencingFloor{newFloor(newGoRedis(r.Addr))}
	t.Cleanup(func() { _ = c.Close() })
	var last int64
	for i := 0; i < 50; i++ {
		if i == 25 {
			// A counter far ahead of the clock, as after the clock stepped back.
			if err := c.f.rdb.Set(ctx, "{n}:fence", last+1_000_000_000_000, 0).Err(); err != nil {
				t.Fatal(err)
			}
			last += 1_000_000_000_000
		}
		h, err := c.TryObtain(ctx, "n")
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		tok := h.(*fencingFloorHeld).token
		if tok <= last {
			t.Fatalf("cycle %d: token %d after %d", i, tok, last)
		}
		last = tok
		if _, err := c.TryObtain(ctx, "n"); !isErrHeld(err) {
			t.Fatalf("cycle %d: second TryObtain on a held name: %v", i, err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.f.rdb.Exists(ctx, "{n}").Val(); n != 0 {
		t.Fatalf("the lock key is left after the last release")
	}
}

func TestMain(m *testing.M) {
	etcdtest.ServeIfAsked() // the sizing scenario's etcd member: this test binary, run again
	os.Exit(m.Run())
}
