package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fencelock/fencelock/etcdbackend/etcdtest"
	"github.com/fencelock/fencelock/internal/testserver"
)

// workerEnv carries a worker's configuration when the test binary runs as a worker.
const workerEnv = "FENCELOCK_SAFETY_WORKER"

func TestMain(m *testing.M) {
	if raw := os.Getenv(workerEnv); raw != "" {
		var cfg WorkerConfig
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := RunWorker(context.Background(), cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if path := os.Getenv("FENCELOCK_SAFETY_DOCS"); path != "" && code == 0 {
		if err := writeResults(path, recorded()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func spawn(cfg WorkerConfig) *exec.Cmd {
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	return cmd
}

// full says whether to run the long version: FENCELOCK_SAFETY_FULL=1.
var full = os.Getenv("FENCELOCK_SAFETY_FULL") == "1"

// Scenario 1: workers paused 2×TTL at random points, including between read and write. With
// fencing, no acknowledged addition is lost and no stale write is accepted; without, the
// losses are reported.
func TestPausedWorkers(t *testing.T) {
	t.Parallel() // asleep or stopped most of the time: it runs beside the other scenarios
	backends := []struct {
		name string
		url  func(t *testing.T) string
		ttl  time.Duration
		hold time.Duration // the longest sleep between read and write
	}{
		{"redis (single node)", func(t *testing.T) string { return "redis://" + testserver.StartRedis(t).Addr }, 500 * time.Millisecond, 125 * time.Millisecond},
		{"etcd (1 member)", startEtcd, 2 * time.Second, 100 * time.Millisecond},
	}
	for _, b := range backends {
		for _, fenced := range []bool{true, false} {
			store := "unfenced"
			if fenced {
				store = "fenced"
			}
			t.Run(b.name+"/"+store, func(t *testing.T) {
				t.Parallel() // the runs share nothing, and spend their time asleep or stopped
				sc := Scenario{Backend: b.url(t), Fenced: fenced, Workers: 3, Cycles: 30, Pauses: 3, TTL: b.ttl, Hold: b.hold, Spawn: spawn}
				if full {
					sc.Cycles, sc.Pauses = 3400, 20
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
				defer cancel()
				r, err := sc.Run(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(r.WorkerFailures) > 0 {
					t.Fatalf("workers failed: %v", r.WorkerFailures)
				}
				t.Logf("%+v", r)
				if r.PausesDone == 0 || r.Acknowledged == 0 {
					t.Fatalf("the run paused %d workers and acknowledged %d additions: it tested nothing", r.PausesDone, r.Acknowledged)
				}
				if fenced && (r.LostAdditions != 0 || r.StaleAccepted != 0) {
					t.Fatalf("with fencing: %d lost additions, %d stale writes accepted", r.LostAdditions, r.StaleAccepted)
				}
				record(outcome{Scenario: 1, Title: "worker paused 2×TTL", Backend: b.name, Setting: store + " store",
					Rounds: sc.Workers * sc.Cycles, Unit: "cycles", StaleRefused: r.StaleRefused, StaleAccepted: r.StaleAccepted,
					LostAdditions: r.LostAdditions, Note: fmt.Sprintf("%d pauses, %d writes, %d acknowledged, %d overlapping holds", r.PausesDone, r.Writes, r.Acknowledged, r.Overlaps)})
			})
		}
	}
}

// startEtcd starts a real single-member etcd in this process and returns its URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	return "etcd://" + etcdtest.Start(t, etcdtest.Options{}).Members[0].Addr
}
