package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock"
)

func init() { commands = append(commands, newDoctorCmd) }

// The severities of a finding. Only fail breaks safety and makes doctor exit non-zero.
const (
	sevOK   = "ok"
	sevInfo = "info"
	sevWarn = "warn"
	sevFail = "fail"
)

// doctorTimeout bounds the whole audit; each command to a node has a shorter bound of its own.
const (
	doctorTimeout = time.Minute
	doctorStep    = 5 * time.Second
	doctorPings   = 5
)

// finding is one conclusion of the audit: what was checked, where, how bad, and what it means
// for a lock.
type finding struct {
	Check    string `json:"check"`
	Node     string `json:"node,omitempty"` // empty for the deployment as a whole
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// doctorReport is what doctor prints with --json.
type doctorReport struct {
	Backend  string    `json:"backend"`
	Findings []finding `json:"findings"`
	OK       bool      `json:"ok"`
}

func newDoctorCmd(g *globals) *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Audit the backend for what can make a lock unsafe",
		Long: `doctor audits the backend's deployment for what can let two holders hold one lock, and
explains each finding: what it means for a lock, and what to change.

For Redis (single server, Sentinel, Cluster) it reads from every node it can reach:
  - maxmemory-policy: anything but noeviction can evict a held lock's key
  - persistence (appendonly, appendfsync, RDB snapshots): what a restart does to held locks
  - replication and min-replicas-to-write: what a failover can lose
  - Sentinel or Cluster topology, and for several nodes whether they are distinct servers
  - the server clock's offset from this machine's, against the TTL
  - the round trip (PING), against the TTL
For etcd it reports the members and the leader and checks the round trip; the Redis checks
do not apply.

--ttl is the TTL your programs lock with: round trips and clock offsets are judged against it.

Exit status:
  0    no finding breaks lock safety (warnings may still deserve a look)
  1    at least one finding breaks lock safety (severity "fail")
  2    bad command line or backend URL
  125  the backend could not be reached`,
		Example: `  # audit the default backend for 30s locks
  fencelock doctor

  # a Cluster, for locks with a 10s TTL
  fencelock doctor --backend redis+cluster://10.0.0.1:7000,10.0.0.2:7000 --ttl 10s

  # in a deployment check: fail the pipeline on a finding that breaks safety
  FENCELOCK_BACKEND=redis+sentinel://10.0.0.5:26379/locks fencelock doctor --json | jq .ok`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDoctor(cmd.Context(), g, ttl, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", fencelock.DefaultTTL, "the TTL your locks use; round trips and clock offsets are judged against it")
	return cmd
}

func runDoctor(ctx context.Context, g *globals, ttl time.Duration, out io.Writer) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	raw := g.backendURL()
	s, err := openStore(raw)
	if err != nil {
		return err
	}
	defer func() { _ = s.close() }()
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	if err := s.ping(ctx); err != nil {
		return err
	}

	var findings []finding
	switch {
	case s.etcd != nil:
		findings, err = auditEtcd(ctx, s, ttl)
	case s.redis != nil:
		findings, err = auditRedis(ctx, s, raw, ttl)
	case len(s.nodes) > 0:
		findings = auditRedlock(ctx, s.nodes, ttl)
	default:
		err = fmt.Errorf("doctor cannot audit a %s backend yet", s.kind)
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("audit interrupted: %w", context.Cause(ctx))
	}
	if err != nil {
		return exitf(exitFailure, "doctor %s: %v", s.url, err)
	}

	rep := doctorReport{Backend: s.url, Findings: findings, OK: true}
	if rep.Findings == nil {
		rep.Findings = []finding{}
	}
	for _, f := range findings {
		if f.Severity == sevFail {
			rep.OK = false
		}
	}
	if g.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitf(exitFailure, "writing the report: %v", err)
		}
	} else {
		printDoctor(out, rep, ttl)
	}
	if !rep.OK {
		return &exitError{code: exitFinding} // the report says why
	}
	return nil
}

// printDoctor prints one line per finding, in the order they were found, then a summary.
func printDoctor(out io.Writer, rep doctorReport, ttl time.Duration) {
	fmt.Fprintf(out, "Auditing %s for locks with a %v TTL\n\n", rep.Backend, ttl)
	wCheck, wNode := len("check"), len("node")
	for _, f := range rep.Findings {
		wCheck = max(wCheck, len(f.Check))
		wNode = max(wNode, len(nodeLabel(f.Node)))
	}
	counts := map[string]int{}
	for _, f := range rep.Findings {
		counts[f.Severity]++
		fmt.Fprintf(out, "%-4s  %-*s  %-*s  %s\n", severityMarker(f.Severity), wCheck, f.Check, wNode, nodeLabel(f.Node), f.Message)
	}
	var parts []string
	for _, s := range []struct {
		sev, one, many string
	}{
		{sevFail, "failure", "failures"}, {sevWarn, "warning", "warnings"},
		{sevInfo, "note", "notes"}, {sevOK, "ok", "ok"},
	} {
		if n := counts[s.sev]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, plural(n, s.one, s.many)))
		}
	}
	fmt.Fprintln(out)
	switch {
	case !rep.OK:
		fmt.Fprintf(out, "%s: locks on this backend are not safe; fix the FAIL lines above.\n", strings.Join(parts, ", "))
	case counts[sevWarn] > 0:
		fmt.Fprintf(out, "%s: nothing breaks lock safety outright; read the WARN lines above.\n", strings.Join(parts, ", "))
	default:
		fmt.Fprintf(out, "%s: nothing found that breaks lock safety.\n", strings.Join(parts, ", "))
	}
}

func severityMarker(sev string) string {
	switch sev {
	case sevFail:
		return "FAIL"
	case sevWarn:
		return "WARN"
	}
	return sev
}

func nodeLabel(node string) string {
	if node == "" {
		return "-"
	}
	return node
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// judgeRTT compares the slowest round trip with the TTL: the watchdog renews every TTL/3, and
// a renewal that takes a large part of the TTL leaves no room for a retry before the lock
// expires.
func judgeRTT(node string, rtts []time.Duration, ttl time.Duration) finding {
	p50, worst := medianDur(rtts), slices.Max(rtts)
	f := finding{Check: "round-trip", Node: node}
	detail := fmt.Sprintf("round trip p50 %v, max %v over %d requests", roundDur(p50), roundDur(worst), len(rtts))
	switch {
	case worst > ttl/3:
		f.Severity = sevFail
		f.Message = fmt.Sprintf("%s: more than a third of the %v TTL. The watchdog renews every TTL/3, so a renewal this slow arrives after the lock may have expired and been taken by someone else. Use a TTL of at least %v (10x the round trip), or run the client closer to the server.", detail, ttl, roundDur(10*worst))
	case worst > ttl/10:
		f.Severity = sevWarn
		f.Message = fmt.Sprintf("%s: more than a tenth of the %v TTL, little room for a renewal to be retried before the lock expires. A TTL of %v or more (10x the round trip) leaves that room.", detail, ttl, roundDur(10*worst))
	default:
		f.Severity = sevOK
		f.Message = fmt.Sprintf("%s: small against the %v TTL.", detail, ttl)
	}
	return f
}

func medianDur(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// roundDur keeps three significant digits or so, for reading.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}
