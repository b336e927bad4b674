package main

import (
	"encoding/json"
	"testing"
	"time"
)

// The demo with no backend flag starts its own etcd and shows the story: oversold without the
// lock, exact with the lock, oversold again when holders are paused past the TTL, and exact
// with fencing, where the stale writes are refused.
func TestDemo(t *testing.T) {
	res := cli(t, 5*time.Minute, []string{"FENCELOCK_BACKEND="}, "demo", "--json")
	if res.code != 0 {
		t.Fatalf("demo exited %d: %s", res.code, res.stderr)
	}
	var out struct {
		Stock   int64        `json:"stock"`
		Results []demoResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("demo --json: %v\n%s", err, res.stdout)
	}
	if len(out.Results) != 4 {
		t.Fatalf("%d results", len(out.Results))
	}
	noLock, lock, paused, fenced := out.Results[0], out.Results[1], out.Results[2], out.Results[3]
	t.Logf("%+v", out.Results)
	if noLock.Oversold == 0 || noLock.LostUpdates == 0 {
		t.Errorf("without the lock nothing was oversold: %+v", noLock)
	}
	if lock.Oversold != 0 || lock.LostUpdates != 0 || lock.Sold != int(out.Stock) || lock.FinalStock != 0 {
		t.Errorf("with the lock: %+v", lock)
	}
	if paused.PausedWriters == 0 || paused.LostUpdates == 0 || paused.Oversold == 0 {
		t.Errorf("paused holders without fencing did not show the double holder: %+v", paused)
	}
	if fenced.Oversold != 0 || fenced.Sold != int(out.Stock) || fenced.FinalStock != 0 || fenced.StaleRefused == 0 || fenced.LostUpdates != 0 {
		t.Errorf("with fencing: %+v", fenced)
	}
}
