package etcdtest

import (
	"context"
	"testing"
	"time"
)

// A killed leader is replaced, and once restarted serves again with the data it had, on its
// own endpoint.
func TestRestartKilledLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := Start(t, Options{Members: 3})
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	if _, err := cli.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	if leader.Running() {
		t.Fatal("a killed member runs")
	}
	if next, err := c.Leader(ctx); err != nil || next == leader {
		t.Fatalf("leader after the kill: %v %v", next, err)
	}
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Restart(); err == nil {
		t.Fatal("a running member restarted")
	}
	own := c.ClientOf(t, leader.Endpoint)
	resp, err := own.Get(ctx, "before") // linearizable: the member is back in the cluster
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("read through the restarted member: %v %v", resp, err)
	}
}
