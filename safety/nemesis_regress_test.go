package safety

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// nemesisRegressions are seeds with which the nemesis found a hole in the code as it was before
// the fixes of December 2026. Each one replays its schedule, and every checker must then pass.
// On that code they failed (oldFails: the checker that fired, and how many of three replays
// reproduced it); their outcome still depends on timing, so a replay that passes on the old
// code proves nothing, and one that fails on the new code is a finding.
var nemesisRegressions = []struct {
	hole     string // what the seed found
	backend  string // as in nemesisBackends
	seed     uint64
	d        time.Duration
	oldFails string
}{}

// The seeds of the holes the nemesis found. Skipped unless FENCELOCK_NEMESIS_REGRESSION=1
// until the fixes are merged: on the old code they are expected to fail.
func TestNemesisRegression(t *testing.T) {
	if ok, _ := strconv.ParseBool(os.Getenv("FENCELOCK_NEMESIS_REGRESSION")); !ok {
		t.Skip("set FENCELOCK_NEMESIS_REGRESSION=1: these seeds fail on the code before the fixes")
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
