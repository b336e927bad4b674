package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

const doctorWait = time.Minute

// doctorJSON runs doctor --json and decodes its report.
func doctorJSON(t *testing.T, backend string, args ...string) (doctorReport, result) {
	t.Helper()
	r := cli(t, doctorWait, nil, append([]string{"doctor", "--json", "--backend", backend}, args...)...)
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json printed no report (exit %d): %v\nstdout:\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
	}
	return rep, r
}

// findingOf returns the finding of check on node.
func findingOf(t *testing.T, rep doctorReport, check, node string) finding {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Check == check && f.Node == node {
			return f
		}
	}
	t.Fatalf("no %s finding for node %q in %+v", check, node, rep.Findings)
	return finding{}
}

func TestDoctorEvictionPolicyFails(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartRedis(t, "--maxmemory-policy", policy)
			backend := "redis://" + srv.Addr

			r := cli(t, doctorWait, nil, "doctor", "--backend", backend)
			if r.code != exitFinding {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitFinding, r.stdout, r.stderr)
			}
			line := lineWith(r.stdout, policy)
			if !strings.HasPrefix(line, "FAIL") || !strings.Contains(line, "eviction") || !strings.Contains(line, "noeviction") {
				t.Errorf("the eviction finding should FAIL, name %s and say what to set; got %q\n%s", policy, line, r.stdout)
			}
			if !strings.Contains(r.stdout, "not safe") {
				t.Errorf("the summary does not say locks are not safe:\n%s", r.stdout)
			}

			rep, jr := doctorJSON(t, backend)
			if jr.code != exitFinding || rep.OK {
				t.Fatalf("--json: exit %d, ok %v; want %d, false", jr.code, rep.OK, exitFinding)
			}
			if f := findingOf(t, rep, "eviction", srv.Addr); f.Severity != sevFail || !strings.Contains(f.Message, policy) {
				t.Errorf("eviction finding %+v", f)
			}
			if rep.Backend != backend {
				t.Errorf("backend %q, want %q", rep.Backend, backend)
			}
		})
	}
}

func TestDoctorSafeServerPasses(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, "--maxmemory-policy", "noeviction", "--appendonly", "yes", "--appendfsync", "always")
	backend := "redis://" + srv.Addr

	r := cli(t, doctorWait, nil, "doctor", "--backend", backend, "--ttl", "10s")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, check := range []string{"eviction", "persistence", "replication", "clock", "round-trip"} {
		if lineWith(r.stdout, check) == "" {
			t.Errorf("no %s line:\n%s", check, r.stdout)
		}
	}

	rep, jr := doctorJSON(t, backend)
	if jr.code != 0 || !rep.OK {
		t.Fatalf("--json: exit %d, ok %v; want 0, true\n%s", jr.code, rep.OK, jr.stdout)
	}
	for _, check := range []string{"eviction", "persistence", "clock", "round-trip"} {
		if f := findingOf(t, rep, check, srv.Addr); f.Severity != sevOK {
			t.Errorf("%s finding %+v, want ok", check, f)
		}
	}
}

// TestDoctorNamesTheServer checks that the topology finding names the server by what it is:
// Valkey answers INFO with redis_version 7.2.4 beside its own valkey_version.
func TestDoctorNamesTheServer(t *testing.T) {
	for _, tc := range []struct{ flavor, name, versionField string }{
		{"redis", "Redis server", "redis_version"},
		{"valkey", "Valkey server", "valkey_version"},
	} {
		t.Run(tc.flavor, func(t *testing.T) {
			t.Setenv(testserver.FlavorEnv, tc.flavor) // no t.Parallel: it reads the environment
			srv, err := testserver.NewRedis()
			if errors.Is(err, testserver.ErrNotInstalled) {
				t.Skipf("no %s to start (scripts/test installs it): %v", tc.name, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			info, err := srv.ClientT(t).Info(context.Background(), "server").Result()
			if err != nil {
				t.Fatal(err)
			}
			version := parseInfo(info)[tc.versionField]
			if version == "" {
				t.Fatalf("INFO server has no %s:\n%s", tc.versionField, info)
			}

			rep, r := doctorJSON(t, "redis://"+srv.Addr)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			want := "one " + tc.name + " (version " + version + ")"
			if f := findingOf(t, rep, "topology", srv.Addr); !strings.HasPrefix(f.Message, want) {
				t.Errorf("topology finding %q, want it to begin %q", f.Message, want)
			}
		})
	}
}

func TestDoctorPersistenceOffWarns(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t) // the harness turns persistence off
	rep, r := doctorJSON(t, "redis://"+srv.Addr)
	if r.code != 0 || !rep.OK {
		t.Fatalf("exit %d, ok %v: persistence off is a warning, not a failure\n%s", r.code, rep.OK, r.stdout)
	}
	f := findingOf(t, rep, "persistence", srv.Addr)
	if f.Severity != sevWarn || !strings.Contains(f.Message, "held locks vanish") {
		t.Errorf("persistence finding %+v", f)
	}
}

func TestDoctorEverysecIsInfo(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, "--appendonly", "yes", "--appendfsync", "everysec")
	rep, _ := doctorJSON(t, "redis://"+srv.Addr)
	if f := findingOf(t, rep, "persistence", srv.Addr); f.Severity != sevInfo || !strings.Contains(f.Message, "1s") && !strings.Contains(f.Message, "second") {
		t.Errorf("persistence finding %+v", f)
	}
}

func TestDoctorConfigDisabledWarns(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, "--rename-command", "CONFIG", "")
	rep, r := doctorJSON(t, "redis://"+srv.Addr)
	if r.code != 0 {
		t.Fatalf("exit %d; CONFIG disabled is a warning\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if f := findingOf(t, rep, "config", srv.Addr); f.Severity != sevWarn {
		t.Errorf("config finding %+v", f)
	}
	// INFO still tells the eviction policy.
	if f := findingOf(t, rep, "eviction", srv.Addr); f.Severity != sevOK {
		t.Errorf("eviction finding %+v", f)
	}
}

func TestDoctorClusterPerNode(t *testing.T) {
	t.Parallel()
	c := testserver.StartCluster(t, 3)
	backend := "redis+cluster://" + strings.Join(c.Addrs, ",")
	rep, r := doctorJSON(t, backend)
	if r.code != 0 || !rep.OK {
		t.Fatalf("exit %d, ok %v\n%s\n%s", r.code, rep.OK, r.stdout, r.stderr)
	}
	for _, addr := range c.Addrs {
		for _, check := range []string{"eviction", "persistence", "replication", "clock", "round-trip"} {
			findingOf(t, rep, check, addr)
		}
	}
	if f := findingOf(t, rep, "topology", ""); !strings.Contains(f.Message, "3 masters") {
		t.Errorf("topology finding %+v", f)
	}
	if f := findingOf(t, rep, "independence", ""); f.Severity != sevOK {
		t.Errorf("independence finding %+v", f)
	}
}

func TestDoctorSentinel(t *testing.T) {
	t.Parallel()
	s := testserver.StartSentinel(t)
	backend := "redis+sentinel://" + strings.Join(s.SentinelAddrs, ",") + "/" + s.MasterName
	rep, r := doctorJSON(t, backend)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if f := findingOf(t, rep, "sentinel", s.SentinelAddrs[0]); f.Severity != sevWarn || !strings.Contains(f.Message, s.Master.Addr) {
		t.Errorf("one sentinel should warn and name the master: %+v", f)
	}
	if f := findingOf(t, rep, "replication", s.Master.Addr); f.Severity != sevWarn || !strings.Contains(f.Message, "WithReplicas") {
		t.Errorf("a master with a replica and min-replicas-to-write 0 under Sentinel should warn: %+v", f)
	}
	findingOf(t, rep, "eviction", s.Replica.Addr)
	if f := findingOf(t, rep, "replication", s.Replica.Addr); !strings.Contains(f.Message, s.Master.Addr) {
		t.Errorf("replica finding %+v", f)
	}
}

func TestDoctorUnreachableBackend(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"doctor"}, {"doctor", "--json"}} {
		r := cli(t, doctorWait, nil, append(args, "--backend", "redis://:hunter2@127.0.0.1:1")...)
		if r.code != exitFailure {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitFailure)
		}
		if len(args) == 1 && (r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "fencelock: ")) {
			t.Errorf("%v: want one line on stderr and nothing on stdout; got stdout %q stderr %q", args, r.stdout, r.stderr)
		}
		// With --json the error is JSON on stdout, for the script that asked for JSON.
		if len(args) == 2 && (r.stderr != "" || !strings.Contains(r.stdout, `"error": "backend redis://:xxxxx@127.0.0.1:1 does not answer`) || !strings.Contains(r.stdout, `"exit_code": 125`)) {
			t.Errorf("%v: want the error as JSON on stdout and nothing on stderr; got stdout %q stderr %q", args, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("%v: the password leaked: %q %q", args, r.stdout, r.stderr)
		}
	}
}

func TestDoctorNeverShowsPassword(t *testing.T) {
	t.Parallel()
	// The harness checks readiness with a PING that a password would refuse: set it after.
	srv := testserver.StartRedis(t)
	if err := srv.ClientT(t).ConfigSet(context.Background(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	backend := "redis://:secret@" + srv.Addr
	for _, args := range [][]string{{"doctor"}, {"doctor", "--json"}} {
		r := cli(t, doctorWait, nil, append(args, "--backend", backend)...)
		if r.code != 0 {
			t.Errorf("%v: exit %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, "secret") {
			t.Errorf("%v: the password leaked:\n%s\n%s", args, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, srv.Addr) {
			t.Errorf("%v: the server is not named:\n%s", args, r.stdout)
		}
	}
	// A wrong password fails with one line, without the password either, as bad input: the
	// server answered, and the URL is what to fix.
	r := cli(t, doctorWait, nil, "doctor", "--backend", "redis://:wrongsecret@"+srv.Addr)
	if r.code != exitUsage || strings.Contains(r.stdout+r.stderr, "secret") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("wrong password: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestDoctorBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"doctor", "--ttl", "0s"},
		{"doctor", "--ttl", "1ms"},
		{"doctor", "--ttl", "soon"},
		{"doctor", "extra"},
		{"doctor", "--backend", "mysql://127.0.0.1"},
	} {
		r := cli(t, doctorWait, nil, args...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q; want %d and one line", args, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
}

func TestDoctorHelp(t *testing.T) {
	t.Parallel()
	r := cli(t, doctorWait, nil, "doctor", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "Exit status") {
		t.Errorf("exit %d\n%s", r.code, r.stdout)
	}
}

// The judgements, on readings no real server in a test would give.

func TestDoctorIndependence(t *testing.T) {
	node := func(addr, id string) *redisNode {
		return &redisNode{addr: addr, info: map[string]string{"run_id": id}}
	}
	f, ok := independence([]*redisNode{node("a:1", "x"), node("b:1", "y"), node("c:1", "x")})
	if !ok || f.Severity != sevFail || !strings.Contains(f.Message, "a:1, c:1") {
		t.Errorf("duplicate run IDs: %+v", f)
	}
	f, ok = independence([]*redisNode{node("a:1", "x"), node("b:1", "y")})
	if !ok || f.Severity != sevOK {
		t.Errorf("distinct run IDs: %+v", f)
	}
	if _, ok := independence([]*redisNode{node("a:1", "x")}); ok {
		t.Error("one node has nothing to be independent of")
	}
}

func TestDoctorThresholds(t *testing.T) {
	ttl := 30 * time.Second
	ms := time.Millisecond
	for _, c := range []struct {
		rtt  time.Duration
		want string
	}{{ms, sevOK}, {4 * time.Second, sevWarn}, {11 * time.Second, sevFail}} {
		if f := judgeRTT("n", []time.Duration{ms, c.rtt, ms}, ttl); f.Severity != c.want {
			t.Errorf("round trip %v against %v: %s, want %s", c.rtt, ttl, f.Severity, c.want)
		}
	}
	for _, c := range []struct {
		offset time.Duration
		want   string
	}{{ms, sevOK}, {-2 * time.Second, sevWarn}, {4 * time.Second, sevWarn}, {-15 * time.Second, sevFail}} {
		n := &redisNode{addr: "n", offset: c.offset, jitter: ms}
		if f := checkClock(n, ttl); f.Severity != c.want {
			t.Errorf("clock offset %v against %v: %s, want %s", c.offset, ttl, f.Severity, c.want)
		}
	}
	for _, c := range []struct {
		config map[string]string
		want   string
	}{
		{map[string]string{"appendonly": "yes", "appendfsync": "always"}, sevOK},
		{map[string]string{"appendonly": "yes", "appendfsync": "everysec"}, sevInfo},
		{map[string]string{"appendonly": "yes", "appendfsync": "no"}, sevWarn},
		{map[string]string{"appendonly": "no", "save": "3600 1"}, sevWarn},
		{map[string]string{"appendonly": "no", "save": ""}, sevWarn},
	} {
		if f := checkPersistence(&redisNode{config: c.config}); f.Severity != c.want {
			t.Errorf("persistence %v: %s, want %s", c.config, f.Severity, c.want)
		}
	}
	writable := &redisNode{
		info:   map[string]string{"role": "slave", "master_host": "127.0.0.1", "master_port": "6379"},
		config: map[string]string{"replica-read-only": "no"},
	}
	if f := checkReplication(writable, modeSingle); f.Severity != sevFail {
		t.Errorf("a writable replica as the backend: %+v", f)
	}
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	lines := strings.Split(s, "\n")
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, sub) }); i >= 0 {
		return lines[i]
	}
	return ""
}
