package safety

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
	"github.com/fencelock/fencelock/redisbackend"
)

// Scenario 6: a Redis Cluster master grants the lock while its replica, its link still up,
// receives nothing (the proxy the master announces, through which the replica replicates, is
// blackholed), and CLUSTER FAILOVER FORCE promotes that replica. Without WithReplicas the grant
// is lost with the old master's unreplicated writes and a second client obtains the same lock
// while the first still holds it as valid; with WithReplicas(1, …) the first acquire finds no
// replica to acknowledge it and is undone, so the failover has nothing to lose.
func TestClusterFailover(t *testing.T) {
	rc := testserver.StartReplicatedCluster(t, 3)
	rounds := 3
	if full {
		rounds = 20
	}
	for _, replicas := range []bool{false, true} {
		setting := "without WithReplicas"
		var opts []redisbackend.Option
		if replicas {
			setting = fmt.Sprintf("WithReplicas(1, %v)", replicaWait)
			opts = append(opts, redisbackend.WithReplicas(1, replicaWait))
		}
		t.Run(setting, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			f := &failoverRounds{
				rc:   rc,
				a:    newClusterLocker(t, rc, opts),
				b:    newClusterLocker(t, rc, opts),
				keys: redisbackend.New(rc.ClientT(t)),
			}
			names := f.namesPerShard(ctx, t, fmt.Sprintf("cluster-failover-%v", replicas))
			for i := 0; i < rounds; i++ {
				// Taking the shards in turn spaces out the elections of each node; one that
				// is elected again soon after its last election has to wait (see Failover).
				f.round(ctx, t, names[i%len(names)])
			}
			t.Logf("%d rounds: %+v", rounds, f.counts)
			n := f.counts
			record(outcome{Scenario: 6, Title: "Cluster failover (FORCE) inside the replication lag", Backend: "redis cluster (3 masters, 1 replica each)",
				Setting: setting, Rounds: rounds, Unit: "rounds", DoubleGrants: n.doubleGrants, StaleRefused: n.staleRefused, StaleAccepted: n.staleAccepted,
				Note: fmt.Sprintf("lock lost at the failover in %d rounds; %d acquires undone for want of a replica ack; %d tokens duplicate or lower than one accepted before",
					n.lost, n.undone, n.regressed)})
			if !replicas {
				if n.lost == 0 {
					t.Fatal("no round lost the lock at the failover: the lag window was never hit")
				}
				return
			}
			if n.undone != rounds {
				t.Fatalf("%d of %d acquires were undone: a replica acknowledged the lock through the blackhole", n.undone, rounds)
			}
			if n.doubleGrants != 0 || n.staleAccepted != 0 || n.regressed != 0 {
				t.Fatalf("with WithReplicas: %d double grants, %d stale writes accepted, %d duplicate or lower tokens",
					n.doubleGrants, n.staleAccepted, n.regressed)
			}
		})
	}
}

const (
	// replicaWait is how long the acquire waits for a replica's acknowledgement.
	replicaWait = 100 * time.Millisecond
	// failoverTTL outlasts a round, so the first holder's lock is still valid, by its own
	// clock, when the second obtains it; its watchdog is off so that nothing but the TTL ends it.
	failoverTTL = 30 * time.Second
)

// failoverRounds runs the rounds of one setting: clients a and b, each with its own cluster
// client, take turns on one lock name per shard, guarded by one fenced store across all rounds.
type failoverRounds struct {
	rc     *testserver.ReplicatedCluster
	a, b   clusterLocker
	keys   *redisbackend.Backend // for Inspect
	store  fence.Memory
	counts struct {
		lost, undone, regressed                   int
		doubleGrants, staleRefused, staleAccepted int
	}
}

type clusterLocker struct{ *fencelock.Client }

func newClusterLocker(t *testing.T, rc *testserver.ReplicatedCluster, opts []redisbackend.Option) clusterLocker {
	rdb := rc.ClientT(t)
	b := redisbackend.New(rdb, opts...)
	c := fencelock.New(b)
	t.Cleanup(func() { _ = c.Close(); _ = b.Close() })
	return clusterLocker{c}
}

// tryObtain is TryObtain with the lock's TTL and no watchdog.
func (f *failoverRounds) tryObtain(ctx context.Context, l clusterLocker, name string) (*fencelock.Lock, error) {
	return l.TryObtain(ctx, name, fencelock.WithTTL(failoverTTL), fencelock.WithWatchdog(false))
}

// namesPerShard returns one lock name for each master.
func (f *failoverRounds) namesPerShard(ctx context.Context, t *testing.T, prefix string) []string {
	t.Helper()
	var names []string
	masters := map[int]bool{}
	for i := 0; len(masters) < 3 && i < 1000; i++ {
		name := prefix + "-" + strconv.Itoa(i)
		m, err := f.rc.Master(ctx, f.keys.Key(name))
		if err != nil {
			t.Fatal(err)
		}
		if !masters[m] {
			masters[m] = true
			names = append(names, name)
		}
	}
	if len(names) < 3 {
		t.Fatalf("lock names fall on %d masters of 3", len(names))
	}
	return names
}

// round blackholes the replication link of the lock's master, lets a obtain the lock, promotes
// the replica, and lets b obtain the lock from the new master.
func (f *failoverRounds) round(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	m, err := f.rc.Master(ctx, f.keys.Key(name))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.rc.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	before, err := f.keys.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	proxy := f.rc.Proxies[m]
	proxy.Blackhole()
	defer proxy.Restore()

	a, err := f.tryObtain(ctx, f.a, name)
	switch {
	case err == nil:
		if err := f.store.Check(name, a.Token()); err != nil {
			t.Fatalf("the first holder's write: %v", err)
		}
		defer func() { _ = a.Release(ctx) }()
	case errors.Is(err, fencelock.ErrUnavailable):
		// The master granted the lock (its fence counter moved) and the Client takes it back,
		// in the background.
		var info fencelock.Info
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var ierr error
			if info, ierr = f.keys.Inspect(ctx, name); ierr != nil {
				t.Fatal(ierr)
			}
			if !info.Held || time.Now().After(deadline) {
				break
			}
		}
		if info.Held || info.Token <= before.Token {
			t.Fatalf("the acquire failed (%v) but was not granted and undone: held %v, fence counter %d -> %d", err, info.Held, before.Token, info.Token)
		}
		f.counts.undone++
	default:
		t.Fatal(err)
	}

	if err := f.rc.Failover(ctx, r, "FORCE"); err != nil {
		t.Fatal(err)
	}
	// The old master resyncs from the new one, which discards what it never replicated.
	if err := f.rc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if a != nil {
		info, err := f.keys.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Owner != a.Owner() {
			f.counts.lost++
		}
	}

	b, err := f.tryObtain(ctx, f.b, name)
	if err != nil {
		if a != nil && errors.Is(err, fencelock.ErrNotObtained) {
			return // the lock survived the failover
		}
		t.Fatalf("the second client, after the failover: %v", err)
	}
	defer func() {
		if err := b.Release(ctx); err != nil {
			t.Errorf("release the second holder's lock: %v", err)
		}
	}()
	if a != nil && a.Valid() == nil {
		f.counts.doubleGrants++
	}
	if b.Token() <= f.store.Latest(name) {
		f.counts.regressed++
		t.Logf("token %d after the failover, %d accepted before", b.Token(), f.store.Latest(name))
	}
	switch err := f.store.Check(name, b.Token()); {
	case err == nil && a != nil && b.Token() == a.Token():
		f.counts.staleAccepted++ // the same token for two holders
	case err != nil && !errors.Is(err, fence.ErrStale):
		t.Fatal(err)
	}
	if a == nil || a.Valid() != nil {
		return
	}
	// The first holder, still sure of its lock, writes again.
	switch err := f.store.Check(name, a.Token()); {
	case err == nil:
		f.counts.staleAccepted++
	case errors.Is(err, fence.ErrStale):
		f.counts.staleRefused++
	default:
		t.Fatal(err)
	}
	if err := a.Refresh(ctx, failoverTTL); !errors.Is(err, fencelock.ErrNotHeld) {
		t.Errorf("the first holder's renewal after the second obtained the lock: %v, want not held", err)
	}
}
