package safety

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// nemesisRegressions are seeds with which the nemesis found a hole in the code as it was before
// the fixes of December 2026. Each one replays its schedule, and every checker must then pass.
// On that code they failed (oldFails: the checker that fired, and what two replays of the seed
// found); their outcome still depends on timing, so the hole itself does not show in every
// replay, and one that fails on the new code is a finding.
var nemesisRegressions = []struct {
	hole     string // what the seed found
	backend  string // as in nemesisBackends
	seed     uint64
	d        time.Duration
	oldFails string
}{
	{"(1) the watchdog missed a new lock: its Done closed 160ms after the validity deadline, with nothing stopping the worker",
		"redlock-5", 265320006, 20 * time.Second, "d; replays: d 0/2, failed b, e, g, h"},
	{"(2) a Redlock token went backwards: a reused owner's grant carried its old token, below another owner's later grant",
		"redlock-3", 326244967, 20 * time.Second, "b, c; replays: b 2/2, c 2/2"},
	{"(2) the same on 5 nodes", "redlock-5", 390399114, 20 * time.Second, "b; replays: b 0/2, failed e, h"},
	{"(4) Refresh to a shorter TTL (510s → 400ms) kept the old deadline: the key expired, another owner took it, the holder wrote as valid",
		"redis", 820514864, 20 * time.Second, "c; replays: c 0/2, failed b, e, g"},
	{"(5) a hand-over with a 6m TTL was trusted for 1.4s (5s − 1% of 6m) and lost before its first renewal",
		"redis", 737009786, 20 * time.Second, "g; replays: g 1/2, e 2/2"},
	{"(6) two goroutines of one owner: the grant with count 1, arriving after the one with count 2, ended the lock as lost",
		"redis", 546662019, 20 * time.Second, "g; replays: g 1/2, e 2/2"},
	{"(8) calls returned up to seconds after their context's deadline (Obtain's cleanup, Release's retries)",
		"redis", 918625242, 20 * time.Second, "e; replays: e 2/2"},
	{"etcd: a re-entry under a shared owner with a longer TTL (8s) was trusted beyond the lease its key lives on",
		"etcd", 926396245, 20 * time.Second, "c; replays: c 0/2, failed e, g"},
	{"etcd: a Refresh to another TTL ended the lock as lost ('the lease expired') while its key was still held",
		"etcd", 5244806, 20 * time.Second, "g; replays: g 1/2, e 2/2"},
	{"Redlock: the validity was TTL − elapsed − drift, less drift again in the Client",
		"redlock-5", 472410474, 20 * time.Second, "h; replays: h 2/2"},
	{"Redis: renewals of a shorter hold of an owner shared across processes cut the key's TTL below what the other process trusted",
		"redis", 58528851, 20 * time.Second, "c; replays: c 2/2"},
	{"ZooKeeper: a lock lost at its validity deadline without a confirmed renewal, with no fault near it",
		"zookeeper", 68050118, 20 * time.Second, "g; replays: g 0/2, failed e"},
	// Found on the code after the first round of fixes.
	{"Redlock: every node kept out of the majority by a check of run IDs cut to the first call's node timeout: no grant in 20 s",
		"redlock-5", 265320006, 20 * time.Second, "the run tested nothing: 0 grants in 376 calls"},
	{"Redlock: a believed-valid overlap, with a shared owner's holds refreshed to a shorter TTL in another worker",
		"redlock-3", 986265924, 10 * time.Second, "c: 1"},
	{"Redlock: two acquisitions of one owner at once each made the lock anew, the later ending the earlier",
		"redlock-3", 744835912, 10 * time.Second, "g: 1"},
	{"ZooKeeper: a waiter whose context ended waited 100 ms more for its node's deletion",
		"zookeeper", 986265924, 10 * time.Second, "e: 4"},
	{"Redlock: a re-entry under an owner shared across processes made the lock anew and dropped the other process's holds; a third owner took it while they were trusted for minutes",
		"redlock-3", 916826416, 40 * time.Second, "c: 9"},
	{"Redlock: the same, and a release that heard one node only deleted the lock where another process's holds were",
		"redlock-3", 320838142, 40 * time.Second, "c: 1, g: 1; replay: c: 2"},
	// Found in December 2026, second round.
	{"Redis: a Refresh to a shorter TTL (2s → 400ms) sent to a stopped server left the lock valid for its old TTL until the call failed a second later, so Done closed 666ms past the deadline it then took",
		"redis", 791579613, 10 * time.Second, "d: 3 in 1 of 12 replays; g: 1 in 4 of 12, a checker's false finding (a lock nothing renewed, held past its deadline)"},
	// Found with the client adapters.
	{"valkey-go adapter: a Subscribe during the subscription connection's reconnect left a keeper on a connection nobody released; the worker hung in Close",
		"redis-valkey-go", 391410965, 10 * time.Second, "worker failed: 2 (still running 90s after the run); replay: the same"},
	{"a hold's deadline timer fired before the hold had stored it, and the worker died of a nil timer in hold.end",
		"redis", 633494415, 10 * time.Second, "worker failed: 1 (the panic) in one full run; fencelock.TestDeadlineTimerThatFiresBeforeItIsStored shows it every time"},
}

// The seeds of the holes the nemesis found, each replayed for 10 to 40 s: in the long suite, or with
// FENCELOCK_NEMESIS_REGRESSION=1 (5 minutes together, too long for the short suite).
func TestNemesisRegression(t *testing.T) {
	if ok, _ := strconv.ParseBool(os.Getenv("FENCELOCK_NEMESIS_REGRESSION")); !ok && !full {
		t.Skip("long suite only (FENCELOCK_SAFETY_FULL=1), or FENCELOCK_NEMESIS_REGRESSION=1")
	}
	for _, r := range nemesisRegressions {
		t.Run(r.backend+"/"+strconv.FormatUint(r.seed, 10), func(t *testing.T) {
			for _, b := range nemesisBackends {
				if b.name == r.backend {
					t.Logf("%s (on the old code: %s)", r.hole, r.oldFails)
					runNemesisChecked(t, r.backend, b.start(t), nemesisShape(r.seed, r.d))
					return
				}
			}
			t.Fatalf("no backend %q", r.backend)
		})
	}
}
