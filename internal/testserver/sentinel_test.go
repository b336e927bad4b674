package testserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	ctx := context.Background()

	cur, err := s.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur != s.Master.Addr {
		t.Fatalf("CurrentMaster = %s, want the initial master %s", cur, s.Master.Addr)
	}
	fc := s.ClientT(t)
	setReplicated(t, ctx, fc, "before", "1")

	// Two failovers: the second proves the demoted master rejoined as a
	// usable replica, which tests doing repeated failovers rely on.
	for i, want := range []string{s.Replica.Addr, s.Master.Addr} {
		t0 := time.Now()
		newMaster, err := s.Failover(ctx)
		t.Logf("failover %d took %v", i+1, time.Since(t0))
		if err != nil {
			t.Fatalf("failover %d: %v", i+1, err)
		}
		if newMaster != want {
			t.Fatalf("failover %d: new master %s, want %s", i+1, newMaster, want)
		}
		if s.Node(newMaster) == nil {
			t.Fatalf("Node(%s) = nil", newMaster)
		}
		key := fmt.Sprintf("after-%d", i+1)
		writeEventually(t, ctx, func(ctx context.Context) error {
			return fc.Set(ctx, key, newMaster, 0).Err()
		})
		direct := directClient(t, newMaster)
		if got, err := direct.Get(ctx, key).Result(); err != nil || got != newMaster {
			t.Fatalf("GET %s on the new master = %q, %v", key, got, err)
		}
		// Data written before the failovers was replicated, not lost.
		if got, err := direct.Get(ctx, "before").Result(); err != nil || got != "1" {
			t.Fatalf("GET before on the new master = %q, %v", got, err)
		}
	}
}

// setReplicated sets key and waits until the replica has it. Replication is asynchronous, and
// neither a forced failover nor a kill waits for it. WAIT counts the writes of its own
// connection, so both go in one pipeline.
func setReplicated(t *testing.T, ctx context.Context, c redis.Cmdable, key, value string) {
	t.Helper()
	var acked *redis.Cmd
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, value, 0)
		acked = p.Do(ctx, "WAIT", 1, 5000)
		return nil
	}); err != nil || acked.Val() != int64(1) {
		t.Fatalf("SET %s and WAIT for the replica = %v, %v", key, acked.Val(), err)
	}
}

// writeEventually retries f: the failover client learns of the new master
// asynchronously, and until then writes may hit the demoted (READONLY) node.
func writeEventually(t *testing.T, ctx context.Context, f func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := withTimeout(ctx, time.Second, f)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("write through the failover client never succeeded: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSentinelFailoverAfterMasterKilled covers the crash case: the old master
// cannot be demoted, and Failover must not wait for it.
func TestSentinelFailoverAfterMasterKilled(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	ctx := context.Background()
	fc := s.ClientT(t)
	setReplicated(t, ctx, fc, "before", "1")
	if err := s.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	newMaster, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newMaster != s.Replica.Addr {
		t.Fatalf("new master %s, want %s", newMaster, s.Replica.Addr)
	}
	writeEventually(t, ctx, func(ctx context.Context) error {
		return fc.Set(ctx, "after", "1", 0).Err()
	})
	if got, err := directClient(t, newMaster).Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("GET before on the new master = %q, %v", got, err)
	}
}

// A proxied deployment: cutting the master's proxy partitions it from the
// replicas and the sentinel, not from a direct client. A write the old master
// takes during the partition is lost when it rejoins.
func TestSentinelProxiedPartition(t *testing.T) {
	t.Parallel()
	s := StartSentinelConfig(t, SentinelConfig{Replicas: 2, Proxied: true})
	ctx := context.Background()
	old, err := s.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old != s.Proxy(s.Master).Addr || s.Node(old) != s.Master {
		t.Fatalf("the sentinel reports %s; the master's proxy is %s", old, s.Proxy(s.Master).Addr)
	}
	direct := directClient(t, s.Master.Addr)
	s.Proxy(s.Master).Blackhole()
	if err := direct.Set(ctx, "partitioned", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	newMaster, err := s.ForceFailover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node(newMaster) == s.Master || s.Node(newMaster) == nil {
		t.Fatalf("new master %s", newMaster)
	}
	// Both replicas follow the new master; the old one still takes writes.
	if err := direct.Set(ctx, "split", "1", 0).Err(); err != nil {
		t.Fatalf("the cut-off master refused a write: %v", err)
	}
	s.Proxy(s.Master).Restore()
	if err := s.Demote(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"partitioned", "split"} {
		if n := directClient(t, s.Node(newMaster).Addr).Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("%s reached the new master", key)
		}
		if n := direct.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("%s survived the demotion", key)
		}
	}
}
