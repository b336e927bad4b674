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
	// Issue 27: holes an attack found that the nemesis walked past, found again once it drew
	// their shapes (docs/SAFETY.md), each on the code before its fix (the commit named), the
	// rest of the code as at 2263a0f or 4ad1e68.
	{"(1) Redis: goroutines of one process waiting under one WithOwner for a full semaphore all got a permit the store counted once; a handle of a burst ended as 'no permit ... is held by this owner' while two other owners held (aa7f7ea)",
		"redis", 1010, 10 * time.Second, "i: 1, in 1 of 2 runs; seeds 1001 (i, a permit) and 1005 (i, a writer beside readers of one owner): in 1 of 2 runs each"},
	{"(2) etcd: callers that disagree on a semaphore's limit held permits of limits 2 and 3 at once (770e684)",
		"etcd", 6004, 10 * time.Second, "j: 3, replay j: 2"},
	{"(2) the same, and 3 permits believed valid of a limit of 2 (770e684)",
		"etcd", 6005, 10 * time.Second, "j: 3, i: 1, k: 1; replay j: 4"},
	{"(3) etcd: an acquisition whose context ended while its put was on its way left its key on the session's lease, held for no one until the process ended (6f951e4)",
		"etcd", 6007, 10 * time.Second, "k: 5, replay k: 7"},
	{"(4) ZooKeeper: Client.Close while holding left the names held for no one while the Backend lived (4ad1e68)",
		"zookeeper", 4001, 10 * time.Second, "k: 4, replay k: 5; etcd seed 4006: k 1 of 1"},
	{"(5) Lead gave fn a context that read no clock: a leader stopped past its term resumed and wrote, its ctx.Err() nil, beside the next leader (3947185)",
		"redis", 3001, 10 * time.Second, "c: 1, in 1 of 2 runs; seeds 3005 and 3006: in 1 of 2 runs each"},
	{"(6) Redis: a server out of memory was ErrInvalid, bad input, not ErrUnavailable (ba617a6)",
		"redis", 1001, 10 * time.Second, "l: 1369, and in every run with an oom fault"},
	{"ZooKeeper: two goroutines of one owner taking permits at once each made the permit anew, the later ending the earlier's handle as lost (fixed on main before 2263a0f: f62c45e, 81d7a91)",
		"zookeeper", 4004, 10 * time.Second, "g: 1, in 2 of 2 runs; seed 4001: in 2 of 2 runs"},
	// Found in a busy full run of December 2026.
	{"ZooKeeper: a Refresh witnessed the node the Backend remembered for its owner, an earlier one an undo had just removed, and said not held of a held lock (664359c)",
		"zookeeper", 949577486, 10 * time.Second, "k: 2 in a full run beside two busy loops; replays: g: 1 in 1 of 3"},
	// Found in 60 s runs of December 2026 (docs/SAFETY.md).
	{"Redlock: two processes of a shared owner obtained at once; one's token round dropped the holds the other's acquisition had just made, and its release freed the name under them (c24c684)",
		"redlock-3", 550178521, 60 * time.Second, "c: 3, in about one 60 s run in four to six"},
	{"Redlock: a release took 'the owner holds a later lock here' for free, and deleted the lock where another process's re-entry held it (b44dda8)",
		"redlock-3", 848510692, 60 * time.Second, "c: 12, in 1 of 3 runs on c24c684"},
}

// The seeds of the holes the nemesis found, each replayed for 10 to 60 s: in the long suite, or with
// FENCELOCK_NEMESIS_REGRESSION=1 (10 minutes together, too long for the short suite).
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
